"""KV reuse across turns: the next call only prefills what is new, and outputs are unchanged."""

from __future__ import annotations

import pytest

from searchrl.models.generation import SamplingParams
from searchrl.models.hf_backend import HFBackend


def _fed_tokens(backend: HFBackend, run) -> tuple[list[int], object]:  # type: ignore[no-untyped-def]
    """Tokens fed to the model per forward call while `run()` executes, and its result."""
    fed: list[int] = []

    def hook(module, args, kwargs):  # type: ignore[no-untyped-def]
        fed.append(int(kwargs["input_ids"].numel()))

    handle = backend._runner.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return fed, run()
    finally:
        handle.remove()


def _two_turns(backend: HFBackend, tokenizer) -> tuple[list, list]:
    prompts = [tokenizer.encode(t) for t in ("one two three four", "a much longer prompt here ok")]
    first = backend.generate(
        prompts, [SamplingParams(max_new_tokens=5, seed=i, continues=True) for i in range(2)]
    )
    extra = tokenizer.encode(" observation text inserted", add_special_tokens=False)
    follow = [p + g.token_ids + extra for p, g in zip(prompts, first, strict=True)]
    second = backend.generate(
        follow, [SamplingParams(max_new_tokens=6, seed=9 + i) for i in range(2)]
    )
    return first, second


def test_second_turn_reuses_the_first_turns_cache(tokenizer, tiny) -> None:
    cached = HFBackend(tiny, tokenizer, max_batch_size=4, prefix_cache=True)
    plain = HFBackend(tiny, tokenizer, max_batch_size=4, prefix_cache=False)
    fed_cached, (first_c, second_c) = _fed_tokens(cached, lambda: _two_turns(cached, tokenizer))
    fed_plain, (first_p, second_p) = _fed_tokens(plain, lambda: _two_turns(plain, tokenizer))
    assert [g.token_ids for g in first_c] == [g.token_ids for g in first_p]
    assert [g.token_ids for g in second_c] == [g.token_ids for g in second_p]
    for a, b in zip(second_c, second_p, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    steps_first = 5  # the first call is the same for both: prefill + 4 decode steps
    second_prefill_cached = fed_cached[steps_first]
    second_prefill_plain = fed_plain[steps_first]
    extra = len(tokenizer.encode(" observation text inserted", add_special_tokens=False))
    assert second_prefill_cached == 2 * (extra + 1)  # last generated token + observation
    assert second_prefill_plain > second_prefill_cached


def test_weight_sync_drops_the_cache(tokenizer, tiny) -> None:
    backend = HFBackend(tiny, tokenizer, max_batch_size=4, prefix_cache=True)
    prompt = tokenizer.encode("hello there")
    (out,) = backend.generate([prompt], [SamplingParams(max_new_tokens=3, continues=True)])
    backend.sync_weights()
    follow = prompt + out.token_ids
    fed, _ = _fed_tokens(
        backend, lambda: backend.generate([follow], [SamplingParams(max_new_tokens=1)])
    )
    assert fed == [len(follow)]
