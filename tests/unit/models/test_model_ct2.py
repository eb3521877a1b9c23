"""The CTranslate2 engine against the HF backend (the reference) on the tiny random Llama: same
greedy tokens and log-probs in float32, the same stop rules, weight sync, tempered log-probs."""

from __future__ import annotations

import copy

import pytest
import torch

from searchrl.config.model import ModelConfig
from searchrl.models import ct2_backend, loading
from searchrl.models.ct2_backend import CT2Backend, EngineUnavailable
from searchrl.models.generation import SamplingParams
from searchrl.models.hf_backend import HFBackend
from searchrl.models.loading import (
    auto_generation_dtype,
    engine_matches_trainer,
    generation_backend,
    resolve_backend,
)
from searchrl.models.precision import cpu_has_fast_bf16

pytest.importorskip("ctranslate2")

TEXTS = ("The answer is", "hello there, who are you", "a b c d e f g h", "<search> rome")


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(t) for t in TEXTS]


def _greedy(n: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=0.0, stop=stop)


class _Tokenizer:
    """The real tokenizer with another EOS id, or a decoder that fails."""

    def __init__(self, tokenizer, eos_token_id: int, broken: bool = False):
        self._tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.broken = broken

    def convert_ids_to_tokens(self, ids):
        return self._tokenizer.convert_ids_to_tokens(ids)

    def decode(self, ids, skip_special_tokens=False):
        if self.broken:
            raise ValueError("decoder broke")
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def test_float32_greedy_tokens_and_logprobs_equal_the_hf_backend(tokenizer, tiny) -> None:
    prompts = _prompts(tokenizer)
    params = [_greedy(n) for n in (12, 5, 9, 1)]
    reference = HFBackend(tiny, tokenizer, max_batch_size=8).generate(prompts, params)
    engine = CT2Backend(tiny, tokenizer, compute_type="float32", max_batch_size=8)
    outputs = engine.generate(prompts, params)
    for out, ref, p in zip(outputs, reference, params, strict=True):
        assert out.token_ids == ref.token_ids
        assert len(out.token_ids) == p.max_new_tokens and out.stop_reason == "length"
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
        assert out.text == tokenizer.decode(out.token_ids)


def test_int8_logprobs_stay_close_to_the_fp32_model(tokenizer, tiny) -> None:
    prompts = _prompts(tokenizer)
    engine = CT2Backend(tiny, tokenizer, compute_type="int8")
    outputs = engine.generate(prompts, [_greedy(10)] * len(prompts))
    for prompt, out in zip(prompts, outputs, strict=True):
        with torch.no_grad():
            logits = tiny(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])
        # int8 kernels differ by CPU: within 0.05 of the fp32 model on AVX512 machines, up to
        # 0.093 (1% of a log-prob of -9.5) with CTranslate2's AVX2 kernels on an AMD EPYC
        assert out.logprobs == pytest.approx(expected.squeeze(1).tolist(), abs=0.15)


def test_stop_strings_end_rows_at_the_same_token_as_the_hf_backend(tokenizer, tiny) -> None:
    prompts = _prompts(tokenizer)
    free = HFBackend(tiny, tokenizer, max_batch_size=8).generate(prompts, [_greedy(16)] * 4)
    # a stop string that the model really writes: the text of tokens 3..5 of row 0
    stop = tokenizer.decode(free[0].token_ids[3:6]).strip()
    assert stop
    params = [_greedy(16, (stop,))] * 4
    reference = HFBackend(tiny, tokenizer, max_batch_size=8).generate(prompts, params)
    outputs = CT2Backend(tiny, tokenizer, compute_type="float32").generate(prompts, params)
    assert outputs[0].stop_reason == "stop" and outputs[0].stop_string == stop
    assert len(outputs[0].token_ids) <= 6
    for out, ref in zip(outputs, reference, strict=True):
        assert (out.token_ids, out.stop_reason, out.stop_string) == (
            ref.token_ids,
            ref.stop_reason,
            ref.stop_string,
        )


def test_an_end_token_ends_the_row_and_is_kept(tokenizer, tiny) -> None:
    prompts = _prompts(tokenizer)[:1]
    (free,) = HFBackend(tiny, tokenizer, max_batch_size=2).generate(prompts, [_greedy(8)])
    end = free.token_ids[2]  # the third token the model writes becomes its end token
    engine = CT2Backend(tiny, _Tokenizer(tokenizer, eos_token_id=end), compute_type="float32")
    (out,) = engine.generate(prompts, [_greedy(8)])
    assert out.stop_reason == "eos"
    assert out.token_ids == free.token_ids[: free.token_ids.index(end) + 1]


def test_sync_makes_the_engine_generate_with_the_new_weights(tokenizer, tiny) -> None:
    model = copy.deepcopy(tiny)
    prompts = _prompts(tokenizer)
    engine = CT2Backend(model, tokenizer, compute_type="float32")
    before = engine.generate(prompts, [_greedy(8)] * 4)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    stale = engine.generate(prompts, [_greedy(8)] * 4)
    engine.sync_weights(model)
    after = engine.generate(prompts, [_greedy(8)] * 4)
    reference = HFBackend(model, tokenizer, max_batch_size=8).generate(prompts, [_greedy(8)] * 4)
    assert [o.token_ids for o in stale] == [o.token_ids for o in before]
    assert [o.token_ids for o in after] == [o.token_ids for o in reference]
    assert [o.token_ids for o in after] != [o.token_ids for o in before]
    assert 0 < engine.last_sync_s < 30


def test_sampled_rows_report_tempered_logprobs_and_repeat_after_a_reload(tokenizer, tiny) -> None:
    prompts = _prompts(tokenizer)
    params = [SamplingParams(max_new_tokens=6, temperature=0.7, seed=s) for s in range(4)]
    engine = CT2Backend(tiny, tokenizer, compute_type="float32")
    first = engine.generate(prompts, params)
    second = engine.generate(prompts, params)  # the stream goes on: other samples
    engine.sync_weights(tiny)  # a reload restarts it from the first call's seeds
    again = engine.generate(prompts, params)
    assert [o.token_ids for o in again] == [o.token_ids for o in first]
    assert [o.token_ids for o in second] != [o.token_ids for o in first]
    for prompt, out in zip(prompts, first, strict=True):
        with torch.no_grad():
            logits = tiny(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / 0.7, -1)
        picked = expected.gather(1, torch.tensor(out.token_ids)[:, None]).squeeze(1)
        assert out.logprobs == pytest.approx(picked.tolist(), abs=1e-4)


def test_an_error_inside_the_step_callback_is_raised_not_fatal(tokenizer, tiny) -> None:
    broken = _Tokenizer(tokenizer, tokenizer.eos_token_id, broken=True)
    engine = CT2Backend(tiny, broken, compute_type="float32")
    with pytest.raises(ValueError, match="decoder broke"):
        engine.generate(_prompts(tokenizer)[:2], [_greedy(4, ("x",))] * 2)


def test_auto_backend_falls_back_to_hf_with_a_notice(tokenizer, tiny, monkeypatch, capsys) -> None:
    def unavailable():
        raise EngineUnavailable("ctranslate2 is not installed")

    monkeypatch.setattr(ct2_backend, "_ctranslate2", unavailable)
    backend = generation_backend(ModelConfig(backend="ct2"), tiny, tokenizer)
    assert isinstance(backend, HFBackend)
    assert "using the HF backend" in capsys.readouterr().out


def test_auto_backend_is_hf_with_a_bf16_copy_only_where_bf16_measures_fast(
    tokenizer, tiny, monkeypatch
) -> None:
    """Multi-turn rollouts need the HF backend's KV cache across turns (CTranslate2 int8 was 3x
    slower on whole rollouts of an AVX512-BF16 Xeon without AMX); the bf16 copy follows the
    precision probe."""
    for native, dtype in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(loading, "fast_bf16", lambda device, native=native: native)
        assert resolve_backend(ModelConfig(device="cpu")) == "hf"
        assert auto_generation_dtype(tiny) == dtype
        hf = generation_backend(ModelConfig(backend="hf", device="cpu"), tiny, tokenizer)
        assert isinstance(hf, HFBackend) and hf.generation_dtype == dtype


def test_only_int8_and_low_precision_copies_count_as_a_mismatch() -> None:
    assert engine_matches_trainer(ModelConfig(backend="ct2", ct2_compute_type="float32"))
    assert engine_matches_trainer(ModelConfig(backend="hf", generation_dtype="float32"))
    # training makes a bf16 generation copy where bf16 is native (models.precision)
    fast = cpu_has_fast_bf16()
    assert engine_matches_trainer(ModelConfig(backend="hf", device="cpu")) is not fast
    assert not engine_matches_trainer(ModelConfig(backend="ct2"))
    assert not engine_matches_trainer(ModelConfig(backend="hf", generation_dtype="bfloat16"))
    assert not engine_matches_trainer(ModelConfig(backend="vllm"))
