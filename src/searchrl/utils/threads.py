"""How many CPU threads torch may use, chosen in one place for every command.

torch starts one OpenMP thread per core. When other processes hold those cores, the threads
spin waiting for each other: on the 2-core dev machine with one other busy process, the same
`searchrl rollout` generated in 7.7 s with one thread and in 119 s with two. So the default is
the number of cores this process may run on (`os.sched_getaffinity`) minus the 1-minute load
average, at least one; processes started together by `accelerate launch`/`torchrun` share the
cores (`LOCAL_WORLD_SIZE`). An explicit setting always wins: a config field such as
`policy.torch_threads`, then `SEARCHRL_THREADS`, then `OMP_NUM_THREADS`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

EXPLICIT_VARS = ("SEARCHRL_THREADS", "OMP_NUM_THREADS")


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and the reason for it (shown by commands that run models)."""

    threads: int
    reason: str

    def describe(self) -> str:
        """One short phrase, e.g. `1 thread (2 cores, load 1.4)`."""
        plural = "" if self.threads == 1 else "s"
        return f"{self.threads} thread{plural} ({self.reason})"


def usable_cores() -> int:
    """Cores this process may be scheduled on (the affinity mask, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _positive_int(raw: str | None) -> int | None:
    if raw is None or not raw.strip().isdigit():
        return None
    value = int(raw)
    return value if value > 0 else None


def choose_threads(
    explicit: int = 0,
    *,
    environ: Mapping[str, str] | None = None,
    cores: int | None = None,
    load: float | None = None,
) -> ThreadChoice:
    """The thread count for this process; `cores` and `load` default to the live values."""
    environ = os.environ if environ is None else environ
    if explicit > 0:
        return ThreadChoice(explicit, "set in the config")
    for name in EXPLICIT_VARS:
        value = _positive_int(environ.get(name))
        if value is not None:
            return ThreadChoice(value, f"{name}={value}")
    cores = usable_cores() if cores is None else cores
    processes = _positive_int(environ.get("LOCAL_WORLD_SIZE")) or 1
    if processes > 1:
        return ThreadChoice(max(1, cores // processes), f"{cores} cores / {processes} processes")
    load = os.getloadavg()[0] if load is None and hasattr(os, "getloadavg") else (load or 0.0)
    free = min(cores, max(1, int(cores - load + 0.5)))
    return ThreadChoice(free, f"{cores} cores, load {load:.1f}")


def apply_threads(explicit: int = 0) -> ThreadChoice:
    """Choose the count and make it take effect: exported as OMP_NUM_THREADS/MKL_NUM_THREADS
    (read when torch is imported, and inherited by child processes) and, when torch is
    already imported, set directly."""
    choice = choose_threads(explicit)
    if explicit > 0 or not any(_positive_int(os.environ.get(v)) for v in EXPLICIT_VARS):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(choice.threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(choice.threads)
    return choice
