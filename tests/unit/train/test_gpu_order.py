"""The order a training run builds its models in, for GPU memory's sake (issue 63): the vLLM
engine first (it reserves its share of a GPU only if that share is free), asleep while the
trainer's models load, FSDP models read into host memory and sharded onto the GPU unit by
unit, and FSDP refused outright with the HF engine. Checked on a CPU with stand-ins for the
engine and mocked CUDA state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.unit.train.fakes import tiny_config, tiny_llama
from transformers import PreTrainedTokenizerBase

from searchrl.config.errors import ConfigError
from searchrl.config.model import ModelConfig
from searchrl.config.train import PolicyConfig
from searchrl.models.loading import LoadedModel, tiny_model
from searchrl.train import environment
from searchrl.train.ports import Distributed


class Engine:
    """A vLLM engine as the run sees it: started, released, synced."""

    owns_weights = True

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.synced_version: int | None = None

    def sync_weights(self, source: Any, version: int | None = None) -> bool:
        self.events.append("sync")
        self.synced_version = version
        return True

    def release(self) -> None:
        self.events.append("release")

    def generate(self, prompts: Any, params: Any) -> list[Any]:
        return []


def test_the_engine_starts_and_sleeps_before_the_trainer_loads_its_models(
    monkeypatch: pytest.MonkeyPatch, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Finding 2: the policy, the frozen reference and the critic were loaded before the
    engine started, so on a GPU vLLM found its share taken (7B PPO ≈ 89 GB of trainer
    state, then vLLM asking 0.6 × 80 GB)."""
    events: list[str] = []

    def start(cls: type, hf_config: Any, tok: Any, config: ModelConfig, **kw: Any) -> Engine:
        events.append("engine")
        return Engine(events)

    def load(model: ModelConfig, policy: PolicyConfig, *, sharded: bool = False) -> Any:
        events.append("policy")
        return tiny_llama(), tokenizer

    from searchrl.models import loading
    from searchrl.models.vllm_backend import VLLMBackend

    monkeypatch.setattr(VLLMBackend, "from_config", classmethod(start))
    monkeypatch.setattr(environment, "load_model_config", lambda m: (tiny_llama().config, None))
    monkeypatch.setattr(environment, "load_tokenizer", lambda m: tokenizer)
    monkeypatch.setattr(loading, "resolve_backend", lambda config, head=None: "vllm")
    monkeypatch.setattr(loading, "_smoke", lambda backend: None)
    monkeypatch.setattr(environment, "load_policy", load)
    config = tiny_config(model={"backend": "vllm"}, algo={"advantage": "gae"})
    _, _, reference, critic, engine = environment.load_models(config, Distributed())
    assert events == ["engine", "release", "policy", "sync"]
    assert isinstance(engine, Engine) and reference is not None and critic is not None


def test_fsdp_with_the_hf_engine_is_refused_before_any_model_loads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Finding 9: FSDP with the HF engine was never refused; that engine would generate with
    the sharded module itself (collective forwards, one rank's rollouts at a time)."""
    folder = tmp_path / "model"
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    def must_not_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(environment, "load_policy", must_not_load)
    config = tiny_config(model={"name_or_path": str(folder), "backend": "hf"})
    sharded = Distributed(rank=0, world_size=2, sharded=True)
    with pytest.raises(ConfigError, match=r"policy.strategy=fsdp: generation needs the vLLM"):
        environment.load_models(config, sharded)


def test_a_sharded_policy_is_read_into_host_memory_even_where_a_gpu_is_visible(
    monkeypatch: pytest.MonkeyPatch, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Finding 2: every rank put the whole fp32 model on its GPU before FSDP sharded it (30 GB
    a rank at 7B). Under FSDP it is read into host memory, and `fully_shard` moves one unit
    at a time to the GPU; DDP still loads straight onto the GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    devices: list[str] = []

    def load(config: ModelConfig) -> LoadedModel:
        devices.append(config.device)
        return LoadedModel(tiny_llama(), tokenizer, torch.device("cpu"), torch.float32)

    monkeypatch.setattr(environment, "load_model", load)
    model, policy = ModelConfig(device="auto"), PolicyConfig(strategy="fsdp")
    environment.load_policy(model, policy, sharded=True)
    environment.load_policy(model, policy, sharded=False)
    assert devices == ["cpu", "auto"]
