"""Loading a model directory behind the vLLM backend hands the engine a tokenizer folder it can
read, and the engine settings are the same on every platform (runs without vLLM: the engine
start is replaced by a stand-in that looks at what it is given)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models import loading, vllm_backend, vllm_engine
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend


def test_the_engine_gets_a_tokenizer_folder_with_the_model_type(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """vLLM logged "ERROR ... Error parsing config for /tmp/searchrl-tokenizer-…: Should have
    a `model_type` key" at every start (twice, with retries), and the folder was never removed.
    The folder is now one per model, kept in the cache (no copy in RAM per start)."""
    model_dir = tmp_path / "model"
    tiny = tiny_model(tokenizer, hidden_size=128, num_layers=1, seed=0)  # head size 32: vLLM-CPU's
    tiny.generation_config.eos_token_id = [tokenizer.eos_token_id, 7]  # an end-of-turn id too
    tiny.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    seen: list[dict[str, Any]] = []

    def start(cls: type, model: str, tok: Any, config: ModelConfig, **kwargs: Any) -> Any:
        folder = Path(kwargs["tokenizer_dir"])
        seen.append(
            {
                "folder": folder,
                "model_type": json.loads((folder / "config.json").read_text())["model_type"],
                "tokenizer": (folder / "tokenizer_config.json").is_file(),
                "eos": json.loads((folder / "generation_config.json").read_text())["eos_token_id"],
            }
        )
        backend = VLLMBackend(None, tok)
        backend._closed = True
        return backend

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "_cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    monkeypatch.setattr(vllm_backend, "engine_dtype", lambda config, device: "float32")
    monkeypatch.setattr(VLLMBackend, "create", classmethod(start))
    monkeypatch.setattr(loading, "_smoke", lambda backend: None)
    config = ModelConfig(name_or_path=str(model_dir), backend="vllm")
    for _ in range(2):
        loading.load_policy(config, max_model_len=256)
    assert seen[0]["model_type"] == "llama" and seen[0]["tokenizer"]
    assert seen[0]["eos"] == [tokenizer.eos_token_id, 7]  # vLLM reads every end id there
    assert seen[0]["folder"] == seen[1]["folder"]  # the same path: vLLM's compile cache key
    assert seen[0]["folder"].parent == tmp_path / "cache"


@pytest.mark.parametrize(
    ("cpu", "asked", "expected"),
    [(True, 0, 32), (True, 64, 64), (False, 0, None), (False, 32, 32)],
)
def test_kv_blocks_are_32_tokens_on_a_cpu_unless_set(
    cpu: bool, asked: int, expected: int | None
) -> None:
    """vLLM's CPU default of 128-token blocks made a reading's candidate answers re-prefill up
    to 127 prompt tokens each (the second wave cost 63 % of the first); a GPU keeps vLLM's."""
    where = vllm_engine.Placement(cpu, in_process=True, several_ranks=False, gpu=0, sleeps=False)
    kwargs = vllm_engine.engine_kwargs(
        ModelConfig(vllm_block_size=asked), model="m", tokenizer_dir="t", dtype="bfloat16",
        max_model_len=256, where=where,
    )  # fmt: skip
    assert kwargs.get("block_size") == expected
    assert ("kv_cache_memory_bytes" in kwargs) == cpu
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["enable_prefix_caching"]
    assert kwargs["worker_extension_cls"] == vllm_engine.WORKER_EXTENSION


def test_the_engine_runs_in_this_process_on_a_cpu_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's own processes each import vLLM, torch and transformers again: a tiny model's
    engine took 45 s to start in them, 9-13 s in the caller. They stay for overlapped
    generation and for ranks of a distributed run on a CPU. On GPUs the engine is colocated
    in the trainer's process (as TRL's and veRL's), every rank's too: the sync then hands it
    GPU tensors with no copy through host memory."""
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    auto = ModelConfig()
    assert vllm_engine.runs_in_process(auto, cpu=True)
    assert vllm_engine.runs_in_process(auto, cpu=False)
    assert not vllm_engine.runs_in_process(auto, cpu=True, overlapped=True)
    assert not vllm_engine.runs_in_process(auto, cpu=False, overlapped=True)
    assert vllm_engine.runs_in_process(ModelConfig(vllm_process="same"), cpu=False)
    assert not vllm_engine.runs_in_process(ModelConfig(vllm_process="separate"), cpu=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not vllm_engine.runs_in_process(auto, cpu=True)
    assert vllm_engine.runs_in_process(auto, cpu=False)
