"""Starting a vLLM engine: where it runs, on which device, and what it is told.

**In this process or in its own.** vLLM's default runs the engine's scheduler and its model
worker in two processes of their own. Each imports vLLM, torch and transformers afresh
(15-25 s each on these 2-core machines), so a tiny model's engine took 45 s to start, 7 s of
it in this process and 32 s in the two spawned ones; in this process (vLLM's
`VLLM_ENABLE_V1_MULTIPROCESSING=0`, one worker in the caller) the same engine starts in
9-13 s. `auto` runs it here unless the engine must generate while this process trains
(`train.overlap`: two threads of one process would share one OpenMP pool and one GIL, and a
GPU engine could not sleep) or another engine runs here already. On a CPU, a rank of several
also keeps it apart (vLLM would join the run's gloo group, sized for the ranks, not for its
one worker). On GPUs an engine in this process is what colocated trainers run (TRL's
`colocate` mode, veRL's hybrid engine): the sync hands it the trainer's GPU tensors with no
copy through host memory, and under `accelerate launch` every rank runs its own engine on its
own GPU (vLLM's `external_launcher`: it reads the rank's `LOCAL_RANK` and joins the run's
process group, one data-parallel engine per rank).

**Which GPU.** An engine in its own processes is told the rank's GPU (`device_ids`, the
index among the visible GPUs): vLLM's single-process executor otherwise takes local rank 0,
and a second rank's engine landed on GPU 0 and failed vLLM's free-memory check.

**Memory.** On GPUs the engine is started before the trainer's models load (`train.run`) and
sleeps between rollouts (`vllm_sleep_mode`, `models.vllm_compat`): vLLM reserves its share of
the GPU at start only if that share is still free.

What an engine in this process changes, and how it is put back: `models.vllm_compat`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from searchrl.config.model import ModelConfig
from searchrl.models.precision import fast_bf16
from searchrl.models.vllm_compat import (
    SAMPLED_LOGPROBS,
    InProcessState,
    import_vllm,
    in_process_start,
    sleep_mode_available,
)
from searchrl.utils.errors import SearchRLError
from searchrl.utils.reaper import Reaper, descendants
from searchrl.utils.threads import bound_cores, core_list, engine_threads, usable_cores

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


def rank_gpu() -> int:
    """The visible GPU this rank trains on: the current CUDA device once one is set
    (accelerate sets it to the rank's), else the launcher's `LOCAL_RANK`, else 0."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    local = os.environ.get("LOCAL_RANK", "")
    return int(local) if local.isdigit() else 0


LIVE_HERE: set[int] = set()
"""ids of the engines running in this process now: vLLM's in-process state (its process
group, its parallel groups) holds one engine at a time, so a second one started while the
first runs (a judge model next to the policy, a test next to the session's engine) gets
processes of its own."""


@dataclass(frozen=True)
class Placement:
    """Where one engine runs and how it spends memory (module docstring)."""

    cpu: bool
    in_process: bool
    several_ranks: bool
    gpu: int
    """The visible GPU index (0 on a CPU)."""
    sleeps: bool
    """Sleep mode: memory handed back between rollouts (`VLLMBackend.release`)."""


def runs_in_process(config: ModelConfig, *, cpu: bool, overlapped: bool = False) -> bool:
    """`vllm_process`: `same` / `separate` as asked; `auto` = this process unless the engine
    generates while it trains, another engine runs here already, or, on a CPU, this process
    is one rank of several (module docstring)."""
    if config.vllm_process != "auto":
        return config.vllm_process == "same"
    return not overlapped and not LIVE_HERE and not (cpu and several_ranks())


def placement(config: ModelConfig, *, cpu: bool, overlapped: bool = False) -> Placement:
    """Where an engine for `config` runs here (`runs_in_process`, `rank_gpu`) and whether
    it sleeps between rollouts: `vllm_sleep_mode` `auto` = where this vLLM build offers it and
    the engine does not generate during updates (overlap); `on` where it cannot is refused."""
    available = sleep_mode_available()
    if config.vllm_sleep_mode == "on" and not available:
        raise SearchRLError(
            "model.vllm_sleep_mode=on: this vLLM build has no sleep mode (the CPU build has "
            "none); use auto or off"
        )
    if config.vllm_sleep_mode == "on" and overlapped:
        raise SearchRLError(
            "model.vllm_sleep_mode=on: an overlapped engine generates while the trainer "
            "updates, it cannot sleep then; use auto or off"
        )
    sleeps = available and not overlapped and config.vllm_sleep_mode != "off"
    return Placement(
        cpu=cpu,
        in_process=runs_in_process(config, cpu=cpu, overlapped=overlapped),
        several_ranks=several_ranks(),
        gpu=0 if cpu else rank_gpu(),
        sleeps=sleeps,
    )


def enforce_eager(config: ModelConfig, cpu: bool) -> bool:
    """`vllm_enforce_eager`, where None is eager on a CPU (compiling takes minutes there) and
    compiled (CUDA graphs) on a GPU."""
    return cpu if config.vllm_enforce_eager is None else config.vllm_enforce_eager


def engine_kwargs(
    config: ModelConfig,
    *,
    model: str,
    tokenizer_dir: str,
    dtype: str,
    max_model_len: int,
    where: Placement,
    dummy: bool = False,
) -> dict[str, Any]:
    """`vllm.LLM` arguments, the same on CPU and GPU but for the KV cache and the device: KV
    blocks are `CPU_BLOCK_SIZE` tokens on a CPU unless `vllm_block_size` says otherwise, the
    cache is sized by `vllm_kv_cache_gib` where vLLM runs on the CPU (its GPU share setting
    would reserve that share of the host's RAM), by `vllm_gpu_memory_utilization` on a GPU;
    on a GPU the engine runs on the rank's device (module docstring). `dummy` starts it with
    placeholder weights that the caller then loads from memory."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": tokenizer_dir,
        "dtype": dtype,
        "seed": config.vllm_seed % 2**31,
        "max_model_len": max_model_len,
        "enable_prefix_caching": True,
        "enforce_eager": enforce_eager(config, where.cpu),
        "gpu_memory_utilization": config.vllm_gpu_memory_utilization,
        "worker_extension_cls": WORKER_EXTENSION,
        "use_tqdm_on_load": False,  # our lines, not its progress bar (`utils.quiet`)
        **SAMPLED_LOGPROBS,
    }
    if dummy:
        kwargs["load_format"] = "dummy"
    if config.vllm_block_size > 0 or where.cpu:
        kwargs["block_size"] = config.vllm_block_size or CPU_BLOCK_SIZE
    if where.cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.vllm_kv_cache_gib * 2**30)
        return kwargs
    if where.sleeps:
        kwargs["enable_sleep_mode"] = True
    if where.in_process and where.several_ranks:
        kwargs["distributed_executor_backend"] = "external_launcher"
    else:
        kwargs["device_ids"] = [where.gpu]
    return kwargs


def model_folder(hf_config: Any, tokenizer: Any, generation: Any = None) -> Path:
    """A folder holding the engine's model config (LM head untied: see `vllm_weights`), its
    generation config (`generation`, else derived from the model config: vLLM reads every
    end-of-sequence id there) and the tokenizer, but no weights: they come from memory. It
    is named by its content and kept in the cache, so every engine of the same model reads
    the same path, which is part of the key of vLLM's compile cache (a fresh folder per start
    made every compiled start compile again). Written once, atomically; concurrent writers
    produce the same bytes."""
    from transformers import GenerationConfig

    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp)
        hf_config.save_pretrained(staging)
        (generation or GenerationConfig.from_model_config(hf_config)).save_pretrained(staging)
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
    and the model's config and generation config (vLLM reads the model type from the
    tokenizer's folder too, and logs an ERROR without it)."""
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(source)
    try:
        generation = GenerationConfig.from_pretrained(source)
    except OSError:  # a model without one: derived from its config
        generation = None
    return model_folder(config, tokenizer, generation)


def _raise_exit(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def exit_on_sigterm() -> None:
    """Make SIGTERM (`kill`, `timeout`, a job scheduler) exit through Python's normal shutdown.
    By default it ends the interpreter without running atexit hooks, and vLLM's engine
    processes outlive the command: an orphaned CPU engine held 4 GB and a quarter of a core for
    49 minutes here after its training run was killed. Only where no handler was installed,
    and only from the main thread (the only one that may install one)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_exit)


def start_here(kwargs: dict[str, Any]) -> tuple[Any, InProcessState]:
    """An engine in this process (`models.vllm_compat.in_process_start`)."""
    vllm = import_vllm()
    with in_process_start(int(kwargs["seed"])) as here:
        llm = vllm.LLM(**kwargs)
    return llm, here


def start_apart(
    kwargs: dict[str, Any], config: ModelConfig, cpu: bool, scratch: Sequence[Path] = ()
) -> tuple[Any, Reaper]:
    """An engine in its own processes. On CPUs their OpenMP threads are bound as
    `vllm_threads_bind` says (vLLM reads it from the environment of its worker) and they run
    one thread per bound core. A reaper watches them from before they exist: a SIGKILLed
    command leaves no engine behind, even one killed while it starts."""
    vllm = import_vllm()
    before = descendants(os.getpid())
    reaper = Reaper()
    reaper.watch_new_descendants(os.getpid(), before)
    for folder in scratch:
        reaper.watch_folder(folder)
    try:
        if cpu:
            bind = core_list(config.vllm_threads_bind)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
            with engine_threads(bound_cores(bind, usable_cores())):
                llm = vllm.LLM(**kwargs)
        else:
            llm = vllm.LLM(**kwargs)
    finally:  # a failed start's leftovers stay watched until this command ends
        reaper.watch_processes(descendants(os.getpid()) - before)
        reaper.stop_looking()
    return llm, reaper
