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
from searchrl.models import vllm_backend, vllm_compat, vllm_engine
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend
from searchrl.models.vllm_engine import Placement
from searchrl.models.vllm_weights import SharedWeights, SharedWeightsLoader
from searchrl.models.weights import weights_version
from searchrl.utils.errors import SearchRLError


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
        here = None
        if seen["here"]:
            here = vllm_compat.InProcessState(
                vllm_compat.EngineStream(torch.get_rng_state()), False
            )
        return cls(Reloads(), tokenizer, torch.float32, here=here)

    seen["here"] = True
    monkeypatch.setattr(VLLMBackend, "create", classmethod(create))
    monkeypatch.setattr(vllm_backend, "import_vllm", lambda: None)
    monkeypatch.setattr(vllm_backend, "on_cpu", lambda: True)
    monkeypatch.setattr(
        vllm_backend,
        "placement",
        lambda *a, **k: Placement(True, seen["here"], False, 0, False),
    )
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


class _Fewer(torch.nn.Module):
    """A source with one weight less than the engine was started with."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.config = model.config
        self.inner = model

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return dict(list(self.inner.state_dict().items())[1:])


def test_the_shared_buffer_holds_each_tensor_exactly(tmp_path: Path, model) -> None:
    """Written in place at every sync (allocated once), read by the worker as views; a state
    with other tensors than the first is refused rather than misread."""
    shared = SharedWeights(tmp_path)
    layout = shared.write(model, torch.bfloat16)
    size = shared.path.stat().st_size
    worker = _Worker()
    worker.searchrl_load_shared(str(shared.path), layout)
    for name, tensor in model.state_dict().items():
        assert worker.loaded[name].dtype == torch.bfloat16
        assert torch.equal(worker.loaded[name], tensor.bfloat16()), name
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    shared.write(model, torch.bfloat16)
    worker.searchrl_load_shared(str(shared.path), layout)
    assert torch.equal(worker.loaded["model.norm.weight"], model.model.norm.weight.bfloat16())
    assert shared.path.stat().st_size == size
    with pytest.raises(ValueError, match="not those the engine was started with"):
        shared.write(_Fewer(model), torch.bfloat16)


def test_a_shared_memory_too_small_for_the_weights_is_refused_in_one_line(
    tmp_path: Path, model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker's /dev/shm is 64 MB: a 7B engine's 15 GB buffer died of SIGBUS when first
    touched. The space is checked before the buffer is mapped."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(
        "searchrl.models.vllm_weights.shutil.disk_usage", lambda _: usage(64 << 20, 0, 1 << 20)
    )
    with pytest.raises(SearchRLError, match=r"1 MiB free.*need [0-9]+ MiB.*--shm-size") as caught:
        SharedWeights(tmp_path).write(model, torch.bfloat16)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "weights.bin").exists()


def test_weights_version_follows_every_write(model: torch.nn.Module) -> None:
    """The fused AdamW kernel the trainer uses leaves torch's in-place version counter as it
    was: an engine synced on that counter never saw an update. The trainer's optimizers
    report their steps to the counters (`track_writes`), so the fingerprint reads them and
    not the weights; any other in-place write, and a replaced tensor, count too."""
    from searchrl.train.models import make_optimizer

    before = weights_version(model)
    assert weights_version(model) == before
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 0] += 1.0
    assert weights_version(model) != before
    optimizer = make_optimizer(model, 1e-3, 0.0)
    assert optimizer.defaults.get("fused")  # the kernel the counters would have missed
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    again = weights_version(model)
    optimizer.step()
    assert weights_version(model) != again
    now = weights_version(model)
    model.load_state_dict(model.state_dict())  # a write, even of the same values
    assert weights_version(model) != now
    now = weights_version(model)
    norm = model.model.norm
    norm.weight.data = norm.weight.data.clone()  # a replaced tensor
    assert weights_version(model) != now


def test_weights_version_reads_no_weight(tokenizer: PreTrainedTokenizerBase) -> None:
    """Summing every weight's bits took 8-20 s a rollout for a 7B model's offloaded shards;
    the fingerprint reads counters only, so it works on the meta device, which has no data
    to read."""
    with torch.device("meta"):
        module = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    before = weights_version(module)
    assert isinstance(before, int) and weights_version(module) == before
    with torch.no_grad():
        module.model.norm.weight.mul_(2.0)
    assert weights_version(module) != before


def test_the_engine_s_stream_is_kept_apart_from_the_caller_s() -> None:
    """An engine in this process samples from torch's global stream: each call swaps its own
    in, so the caller's draws do not depend on how much the engine sampled, and back."""
    torch.manual_seed(0)
    stream = vllm_compat.EngineStream(torch.get_rng_state())
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


def test_weights_digest_is_the_same_for_the_same_values_anywhere(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """The RL pool's screening cache is keyed by the start policy's weights across runs: its
    digest reads the values (two separate copies agree), unlike `weights_version`, whose
    counters and addresses belong to one process."""
    from searchrl.models.weights import weights_digest

    first = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    second = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    assert weights_digest(first) == weights_digest(second)
    assert weights_version(first) != weights_version(second)
    with torch.no_grad():
        second.model.norm.weight.add_(1.0)
    assert weights_digest(first) != weights_digest(second)
