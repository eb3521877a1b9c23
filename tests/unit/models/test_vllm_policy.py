"""Loading a model directory behind the vLLM backend hands the engine a tokenizer folder it can
read (runs without vLLM: the engine start is replaced by a stand-in that looks at the folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models import loading, vllm_backend
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend


def test_the_engine_gets_a_tokenizer_folder_with_the_model_type(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """vLLM logged "ERROR ... Error parsing config for /tmp/searchrl-tokenizer-…: Should have
    a `model_type` key" at every start (twice, with retries), and the folder was never removed."""
    model_dir = tmp_path / "model"
    tiny = tiny_model(tokenizer, hidden_size=128, num_layers=1, seed=0)  # head size 32: vLLM-CPU's
    tiny.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    seen: dict[str, Any] = {}

    def start(cls: type, model: str, tok: Any, config: ModelConfig, **kwargs: Any) -> Any:
        folder = Path(kwargs["tokenizer_dir"])
        seen["folder"] = folder
        seen["model_type"] = json.loads((folder / "config.json").read_text())["model_type"]
        seen["tokenizer"] = (folder / "tokenizer_config.json").is_file()
        backend = VLLMBackend(object(), tok)
        backend._scratch.extend(kwargs["scratch"])  # as `create` does: `close` removes them
        return backend

    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    monkeypatch.setattr(vllm_backend, "engine_dtype", lambda config, device: "float32")
    monkeypatch.setattr(VLLMBackend, "create", classmethod(start))
    config = ModelConfig(name_or_path=str(model_dir), backend="vllm")
    policy = loading.load_policy(config, max_model_len=256)
    assert seen["model_type"] == "llama" and seen["tokenizer"]
    policy.backend.close()
    assert not seen["folder"].exists()


@pytest.mark.parametrize(
    ("on_cpu", "asked", "expected"),
    [(True, 0, 32), (True, 64, 64), (False, 0, None), (False, 32, 32)],
)
def test_kv_blocks_are_32_tokens_on_a_cpu_unless_set(
    monkeypatch: pytest.MonkeyPatch, on_cpu: bool, asked: int, expected: int | None
) -> None:
    """vLLM's CPU default of 128-token blocks made a reading's candidate answers re-prefill up
    to 127 prompt tokens each (the second wave cost 63 % of the first); a GPU keeps vLLM's."""
    monkeypatch.setattr(vllm_backend, "_on_cpu", lambda: on_cpu)
    kwargs = vllm_backend.engine_kwargs(
        ModelConfig(vllm_block_size=asked), model="m", tokenizer_dir="t", dtype="bfloat16",
        max_model_len=256,
    )  # fmt: skip
    assert kwargs.get("block_size") == expected
    assert ("kv_cache_memory_bytes" in kwargs) == on_cpu
