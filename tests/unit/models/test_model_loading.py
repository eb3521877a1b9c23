"""Where weights come from: the embedded default, GGUF files, local directories."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from searchrl.config.model import ModelConfig
from searchrl.models import loading, vllm_engine
from searchrl.models.loading import (
    EMBEDDED_INSTALL,
    ModelNotFoundError,
    embedded_gguf_path,
    head_size,
    load_model,
    resolve_backend,
    resolve_device,
    resolve_dtype,
    resolve_source,
    start_engine,
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


def test_a_hub_id_out_of_reach_says_what_to_do(monkeypatch) -> None:
    """Offline, an uncached hub id ended in a bare `error: OSError`; it is a one-line
    ModelNotFoundError naming the id and the way out."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"no-such-org/no-such-model: not a local model"):
        load_model(ModelConfig(name_or_path="no-such-org/no-such-model"))


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
    """Before anything starts: vLLM where it is installed and can run the head size, else HF;
    an explicit backend is never second-guessed."""
    for installed, expected in ((True, "vllm"), (False, "hf")):
        monkeypatch.setattr(vllm_engine, "vllm_available", lambda installed=installed: installed)
        assert resolve_backend(ModelConfig(device="cpu")) == expected, installed
        assert resolve_backend(ModelConfig(device="cpu"), head=64) == expected
        for explicit in ("hf", "vllm"):
            assert resolve_backend(ModelConfig(backend=explicit, device="cpu")) == explicit


def test_a_head_size_vllm_cpu_cannot_run_stays_on_hf(monkeypatch) -> None:
    """A tiny model (head size 8) under `auto` with vLLM installed used to start vLLM-CPU,
    whose engine core then died at the first forward pass ("internal error (a bug):
    EngineDeadError"); now `auto` keeps it on HF and `backend=vllm` is one clear error."""
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    assert resolve_backend(ModelConfig(device="cpu"), head=8) == "hf"
    assert resolve_backend(ModelConfig(device="cpu"), head=64) == "vllm"
    with pytest.raises(SearchRLError, match="does not run head size 8"):
        resolve_backend(ModelConfig(device="cpu", backend="vllm"), head=8)


def test_the_head_size_is_read_from_the_model_itself(tokenizer, tmp_path) -> None:
    """The check once read `model.name_or_path`'s folder, not the checkpoint being trained
    (`policy.init_checkpoint`), and nothing for a GGUF: now the loaded model's config."""
    assert head_size(tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).config) == 8
    model = tiny_model(tokenizer, hidden_size=128, num_layers=1, seed=0)
    model.config.head_dim = 64  # an explicit head_dim wins over hidden / heads
    assert head_size(model.config) == 64
    model.save_pretrained(tmp_path)
    assert loading._local_head_size(str(tmp_path)) == 64
    assert loading._local_head_size(str(tmp_path / "absent")) is None


class Started:
    """A stand-in engine: `generate` fails when `broken` (an engine that cannot run)."""

    def __init__(self, broken: bool = False) -> None:
        self.broken, self.closed = broken, False
        self.in_process, self.dtype, self.start_s, self.tokenizer = True, "float32", 1.5, None

    def generate(self, prompts, params):  # type: ignore[no-untyped-def]
        if self.broken:
            raise RuntimeError("EngineDeadError")
        return []

    def close(self) -> None:
        self.closed = True


def test_auto_decides_on_a_started_engine_and_says_why(monkeypatch, capsys) -> None:
    """`auto` trusted an import: a vLLM that imported but could not start still won. Now it
    keeps vLLM only once an engine has started and generated a token, and says in one line
    which engine it chose and why."""
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    auto = ModelConfig(device="cpu")
    good = Started()
    assert start_engine(auto, 64, lambda: good) is good
    assert "engine: vllm (auto: installed and started; float32, in this process" in (
        capsys.readouterr().err
    )
    broken = Started(broken=True)
    assert start_engine(auto, 64, lambda: broken) is None and broken.closed
    assert "engine: hf (vLLM is installed but did not start: RuntimeError" in (
        capsys.readouterr().err
    )

    def fails() -> Started:
        raise OSError("no such model")

    assert start_engine(auto, 64, fails) is None
    with pytest.raises(OSError):
        start_engine(ModelConfig(device="cpu", backend="vllm"), 64, fails)
    assert start_engine(auto, 8, fails) is None
    assert "engine: hf (vLLM-CPU cannot run head size 8)" in capsys.readouterr().err
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: False)
    assert start_engine(auto, 64, fails) is None
    assert "vLLM is not installed: `make install-vllm-cpu`" in capsys.readouterr().err
    assert start_engine(ModelConfig(backend="hf"), 64, fails) is None
    assert "engine: hf (model.backend=hf)" in capsys.readouterr().err


def test_the_run_s_seed_reaches_the_vllm_engine(
    monkeypatch: pytest.MonkeyPatch, tokenizer, tmp_path
) -> None:
    """vLLM on a CPU takes no per-request seeds, so the run's seed must start the engine's
    stream (every engine used to start from `vllm_seed` alone: `rollout --seed` changed
    nothing, and a new engine per draw repeated the draw). The real engines' draws are
    compared in test_model_vllm.py where vLLM is installed."""
    from searchrl.models import vllm_backend
    from searchrl.models.vllm_backend import VLLMBackend
    from searchrl.train import environment

    seen: list[int] = []

    def started(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(args[-1].vllm_seed)
        return Started()

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_backend, "engine_dtype", lambda config, device: "float32")
    monkeypatch.setattr(vllm_engine, "_cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(VLLMBackend, "create", lambda source, tok, config, **kw: started(config))
    monkeypatch.setattr(VLLMBackend, "from_module", lambda m, tok, config, **kw: started(config))
    policy = loading.tiny_model(tokenizer, hidden_size=256, num_layers=1, seed=0)
    policy.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    folder = ModelConfig(name_or_path=str(tmp_path / "model"), vllm_seed=5)
    loading.load_policy(folder, max_model_len=64, seed=3)
    loading.load_policy(folder, max_model_len=64)
    environment.make_backend(ModelConfig(vllm_seed=5), policy, tokenizer, 64, seed=2)
    assert seen == [8, 5, 7]
