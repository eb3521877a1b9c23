"""What a vLLM engine is given to load, checked without vLLM: the engine a trainer syncs runs
with its LM head untied, so that vLLM's in-place reload reaches it (on a tied head it loaded
nothing and put the old kernel back: the engine sampled from the first head for the whole run;
`test_model_vllm.py` shows it on the real engine)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models import vllm_backend
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend, _engine_state


@pytest.fixture
def model(tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    module = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    assert module.lm_head.weight is module.model.embed_tokens.weight  # tied, like SmolLM2
    return module


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`VLLMBackend.create` stands in for starting vLLM: it reads what the engine would load."""
    seen: dict[str, Any] = {}

    def create(cls, model: str, tokenizer: Any, config: ModelConfig, **kwargs: Any):
        folder = Path(model)
        seen["config"] = json.loads((folder / "config.json").read_text())
        seen["weights"] = load_file(str(folder / vllm_backend.WEIGHTS_FILE))
        seen["folder"] = folder
        backend = cls(SimpleNamespace(), tokenizer, torch.float32)  # no engine to shut down
        backend._scratch.extend(kwargs["scratch"])  # as `create` does: `close` removes them
        return backend

    monkeypatch.setattr(VLLMBackend, "create", classmethod(create))
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    return seen


def test_the_engine_state_carries_the_head_as_its_own_copy(model: torch.nn.Module) -> None:
    state = _engine_state(model, torch.bfloat16)
    head, embedding = state["lm_head.weight"], state["model.embed_tokens.weight"]
    assert head.dtype == torch.bfloat16 and torch.equal(head, embedding)
    assert head.data_ptr() != embedding.data_ptr()


def test_an_engine_started_from_a_module_has_an_untied_head(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, no_engine: dict[str, Any]
) -> None:
    backend = VLLMBackend.from_module(
        model, tokenizer, ModelConfig(), dtype="float32", max_model_len=64
    )
    assert backend.head_untied
    assert no_engine["config"]["tie_word_embeddings"] is False
    weights = no_engine["weights"]
    assert torch.equal(weights["lm_head.weight"], model.lm_head.weight.detach())
    assert model.config.tie_word_embeddings  # the trainer's own model is left tied
    backend.close()  # and its copy of the weights leaves RAM with it
    assert not no_engine["folder"].exists()


def test_a_sync_into_an_engine_with_a_tied_head_is_refused(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    reloads: list[Any] = []
    llm = SimpleNamespace(collective_rpc=lambda *a, **k: reloads.append(a))
    backend = VLLMBackend(llm, tokenizer, torch.float32)  # as `create` starts it from a folder
    backend._closed = True
    with pytest.raises(ValueError, match="from_module"):
        backend.sync_weights(model)
    assert reloads == []
