"""The vLLM backend's output conversion and weight-sync file, checked without vLLM."""

from __future__ import annotations

from pathlib import Path
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
    """`vllm.LLM`'s two calls that weight sync uses, with in-process "workers" that read the
    weights file they are pointed at, as vLLM's `reload_weights` does."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.loaded: list[dict[str, torch.Tensor]] = []
        self.cache_resets = 0

    def collective_rpc(self, method, kwargs):  # type: ignore[no-untyped-def]
        from safetensors.torch import load_file

        assert method == "reload_weights" and kwargs["is_checkpoint_format"]
        path = Path(kwargs["weights_path"]) / "model.safetensors"
        self.loaded = [load_file(str(path)) for _ in range(self.workers)]
        return [None] * self.workers

    def reset_prefix_cache(self) -> None:
        self.cache_resets += 1


def test_weight_sync_writes_every_tensor_in_the_engine_dtype(tokenizer) -> None:
    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    engine = FakeEngine(workers=2)
    backend = VLLMBackend(llm=engine, tokenizer=tokenizer, dtype=torch.bfloat16)
    backend.sync_weights(source)
    expected = source.state_dict()
    for store in engine.loaded:
        assert store.keys() == expected.keys()
        for name, tensor in expected.items():
            assert store[name].dtype == torch.bfloat16
            assert torch.equal(store[name], tensor.to(torch.bfloat16))
    assert engine.cache_resets == 1 and backend.last_sync_s > 0


def test_weight_sync_writes_a_tied_head_for_the_untied_engine(tokenizer, tiny) -> None:
    """The engine a trainer starts runs its head untied (`from_module`), so every sync writes
    the head, a copy of the embedding (vLLM's reload never reached a tied head)."""
    engine = FakeEngine(workers=1)
    backend = VLLMBackend(llm=engine, tokenizer=tokenizer, dtype=torch.float32)
    backend.head_untied = True
    backend.sync_weights(tiny)
    (store,) = engine.loaded
    assert store.keys() == tiny.state_dict().keys()
    embedding = tiny.model.embed_tokens.weight
    assert torch.equal(store["lm_head.weight"], embedding)
    assert torch.equal(store["model.embed_tokens.weight"], embedding)
