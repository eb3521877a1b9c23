"""What a vLLM engine is given to load, checked without vLLM: the engine a trainer syncs runs
with its LM head untied, so that vLLM's in-place reload reaches it (on a tied head it loaded
nothing and put the old kernel back: the engine sampled from the first head for the whole run);
weights travel in memory, the shared buffer of an engine in its own processes holds them
exactly, and a sync happens only when they changed (`test_model_vllm.py` checks the real
engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models import vllm_backend, vllm_engine
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend
from searchrl.models.vllm_weights import (
    SharedWeights,
    SharedWeightsLoader,
    engine_state,
    weights_version,
)


@pytest.fixture
def model(tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    module = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    assert module.lm_head.weight is module.model.embed_tokens.weight  # tied, like SmolLM2
    return module


class Reloads:
    """`vllm.LLM`'s calls a sync makes, recording what the worker would load."""

    def __init__(self) -> None:
        self.loaded: list[dict[str, torch.Tensor]] = []
        self.cache_resets = 0

    def collective_rpc(self, method: str, kwargs: dict[str, Any]) -> list[None]:
        if method == "reload_weights":
            assert kwargs["is_checkpoint_format"]
            self.loaded.append({k: v.clone() for k, v in kwargs["weights_iterator"]})
        else:  # the worker extension of an engine in its own processes
            worker = _Worker()
            getattr(worker, method)(**kwargs)
            self.loaded.append(worker.loaded)
        return [None]

    def reset_prefix_cache(self) -> None:
        self.cache_resets += 1


class _Worker(SharedWeightsLoader):
    def reload_weights(self, weights_iterator: Any, is_checkpoint_format: bool) -> None:
        self.loaded = {k: v.clone() for k, v in weights_iterator}


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """`VLLMBackend.create` stands in for starting vLLM: it reads the folder it is given."""
    seen: dict[str, Any] = {}

    def create(cls, model: str, tokenizer: Any, config: ModelConfig, **kwargs: Any):
        folder = Path(model)
        seen["config"] = json.loads((folder / "config.json").read_text())
        seen["kwargs"] = kwargs
        seen["files"] = sorted(p.name for p in folder.iterdir())
        stream = vllm_engine.EngineStream(torch.get_rng_state()) if seen["here"] else None
        return cls(Reloads(), tokenizer, torch.float32, stream=stream)

    seen["here"] = True
    monkeypatch.setattr(VLLMBackend, "create", classmethod(create))
    monkeypatch.setattr(vllm_backend, "import_vllm", lambda: None)
    monkeypatch.setattr(vllm_backend, "on_cpu", lambda: True)
    monkeypatch.setattr(vllm_backend, "runs_in_process", lambda *a, **k: seen["here"])
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    monkeypatch.setattr(vllm_engine, "_cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(vllm_backend, "scratch_dir", lambda prefix: _made(tmp_path / "shm"))
    return seen


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("here", [True, False])
def test_an_engine_started_from_a_module_has_an_untied_head_and_its_weights(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    no_engine: dict[str, Any],
    here: bool,
) -> None:
    """Started from the config alone (no weights file in RAM), then synced from memory: in
    this process the tensors themselves, in its own processes through the shared buffer."""
    no_engine["here"] = here
    backend = VLLMBackend.from_module(
        model, tokenizer, ModelConfig(), dtype="float32", max_model_len=64
    )
    assert backend.head_untied and no_engine["kwargs"]["dummy"]
    assert no_engine["config"]["tie_word_embeddings"] is False
    assert not any(name.endswith(".safetensors") for name in no_engine["files"])
    (weights,) = backend.llm.loaded
    assert weights.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(weights[name], tensor), name
    assert torch.equal(weights["lm_head.weight"], model.model.embed_tokens.weight)
    assert model.config.tie_word_embeddings  # the trainer's own model is left tied
    backend._closed = True


def test_a_sync_happens_only_when_the_weights_changed(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, no_engine: dict[str, Any]
) -> None:
    """Every rollout call, evaluations included, re-sent the whole model (270 MB at 135M,
    15 GB at 7B) whether it had changed or not."""
    backend = VLLMBackend.from_module(
        model, tokenizer, ModelConfig(), dtype="float32", max_model_len=64
    )
    assert len(backend.llm.loaded) == 1
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))  # a forward pass changes nothing
    assert not backend.sync_weights(model) and backend.last_sync_s == 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    assert backend.sync_weights(model) and backend.last_sync_s > 0
    assert torch.equal(backend.llm.loaded[-1]["model.norm.weight"], model.model.norm.weight)
    assert backend.llm.cache_resets == 2 and len(backend.llm.loaded) == 2
    with torch.no_grad():
        model.model.layers[0].input_layernorm.weight.mul_(2.0)  # any in-place write counts
    assert backend.sync_weights(model)
    backend._closed = True


def test_a_sync_into_an_engine_with_a_tied_head_is_refused(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    backend = VLLMBackend(Reloads(), tokenizer, torch.float32)  # as `create` starts a folder
    backend._closed = True
    with pytest.raises(ValueError, match="from_module"):
        backend.sync_weights(model)
    assert backend.llm.loaded == []


def test_the_shared_buffer_holds_each_tensor_exactly(tmp_path: Path, model) -> None:
    """Written in place at every sync (allocated once), read by the worker as views; a state
    with other tensors than the first is refused rather than misread."""
    shared = SharedWeights(tmp_path)
    state = engine_state(model, torch.bfloat16)
    layout = shared.write(state)
    size = shared.path.stat().st_size
    worker = _Worker()
    worker.searchrl_load_shared(str(shared.path), layout)
    for name, tensor in state:
        assert worker.loaded[name].dtype == torch.bfloat16
        assert torch.equal(worker.loaded[name], tensor), name
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    shared.write(engine_state(model, torch.bfloat16))
    worker.searchrl_load_shared(str(shared.path), layout)
    assert torch.equal(worker.loaded["model.norm.weight"], model.model.norm.weight.bfloat16())
    assert shared.path.stat().st_size == size
    with pytest.raises(ValueError, match="not those the engine was started with"):
        shared.write(state[1:])


def test_weights_version_follows_every_write(model: torch.nn.Module) -> None:
    """The fused AdamW kernel the trainer uses leaves torch's in-place version counter as it
    was: an engine synced on that counter never saw an update. The fingerprint reads the
    weights themselves."""
    from searchrl.train.models import make_optimizer

    before = weights_version(model)
    assert weights_version(model) == before
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 0] += 1.0
    assert weights_version(model) != before
    optimizer = make_optimizer(model, 1e-3, 0.0)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    versions = [p._version for p in model.parameters()]
    again = weights_version(model)
    optimizer.step()
    assert weights_version(model) != again
    if optimizer.defaults.get("fused"):  # what the counter would have missed
        assert [p._version for p in model.parameters()] == versions
    now = weights_version(model)
    model.load_state_dict(model.state_dict())  # the same values again
    assert weights_version(model) == now


def test_the_engine_s_stream_is_kept_apart_from_the_caller_s() -> None:
    """An engine in this process samples from torch's global stream: each call swaps its own
    in, so the caller's draws do not depend on how much the engine sampled, and back."""
    torch.manual_seed(0)
    stream = vllm_engine.EngineStream(torch.get_rng_state())
    torch.manual_seed(1)
    expected_caller = torch.rand(3)
    torch.manual_seed(1)
    with stream.active():
        first = torch.rand(2)
    caller = torch.rand(3)
    with stream.active():
        second = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(caller, expected_caller)
    assert torch.equal(torch.cat([first, second]), torch.rand(4))
