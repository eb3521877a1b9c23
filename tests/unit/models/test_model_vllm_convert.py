"""The vLLM backend's output conversion, checked without vLLM (GPU-only) installed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from searchrl.models.vllm_backend import VLLMBackend


def completion(token_ids, finish_reason, stop_reason):  # type: ignore[no-untyped-def]
    logprobs = [{t: SimpleNamespace(logprob=-0.5 * (i + 1))} for i, t in enumerate(token_ids)]
    return SimpleNamespace(
        token_ids=token_ids, logprobs=logprobs, finish_reason=finish_reason, stop_reason=stop_reason
    )


@pytest.mark.parametrize(
    ("finish", "stop", "reason", "string"),
    [
        ("stop", "</search>", "stop", "</search>"),
        ("stop", None, "eos", None),
        ("length", None, "length", None),
    ],
)
def test_stop_reasons_map_to_the_backend_contract(tokenizer, finish, stop, reason, string) -> None:
    ids = tokenizer.encode("<search> q </search>", add_special_tokens=False)
    out = VLLMBackend(llm=None, tokenizer=tokenizer)._convert(completion(ids, finish, stop))
    assert out.token_ids == ids and out.text == "<search> q </search>"
    assert out.stop_reason == reason and out.stop_string == string
    assert out.logprobs == [-0.5 * (i + 1) for i in range(len(ids))]


class FakeEngine:
    """`vllm.LLM`'s two calls that weight sync uses, with in-process "workers" whose models
    record what `load_weights` received (vLLM's loader takes (HF name, tensor) pairs)."""

    def __init__(self, workers: int) -> None:
        self.loaded: list[dict[str, torch.Tensor]] = [{} for _ in range(workers)]
        self.cache_resets = 0

    def collective_rpc(self, method):  # type: ignore[no-untyped-def]
        results = []
        for store in self.loaded:
            model = SimpleNamespace(load_weights=lambda weights, store=store: store.update(weights))
            results.append(method(SimpleNamespace(model_runner=SimpleNamespace(model=model))))
        return results

    def reset_prefix_cache(self) -> None:
        self.cache_resets += 1


def test_weight_sync_sends_every_tensor_to_every_worker(tokenizer) -> None:
    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    engine = FakeEngine(workers=2)
    VLLMBackend(llm=engine, tokenizer=tokenizer).sync_weights(source)
    expected = source.state_dict()
    for store in engine.loaded:
        assert store.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(store[name], tensor) and store[name].device.type == "cpu"
            assert store[name].data_ptr() != tensor.data_ptr()  # a copy: later updates can't leak
    assert engine.cache_resets == 1


def test_weight_sync_fails_loudly_when_a_worker_loads_nothing(tokenizer) -> None:
    engine = FakeEngine(workers=1)
    engine.collective_rpc = lambda method: [0]  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="expected 2"):
        VLLMBackend(llm=engine, tokenizer=tokenizer).sync_weights(torch.nn.Linear(2, 2))
