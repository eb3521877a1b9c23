"""How many CPU threads torch may use, chosen in one place for every command.

torch starts one OpenMP thread per core. When other processes hold those cores, the threads
spin waiting for each other: on the 2-core dev machine with one other busy process, the same
`searchrl rollout` generated in 7.7 s with one thread and in 119 s with two. So the default is
the number of cores this process may run on (`os.sched_getaffinity`) minus the cores other
processes keep busy right now (sampled from /proc/stat over a quarter second; the 1-minute load
average where that is missing), at least one. Not the load average itself: it still counts a
job that just ended (the `pip install` before `make demo`'s first command) for a minute or
more, and a long run would then be pinned to one thread on an idle machine. Processes started
together by `accelerate launch`/`torchrun` share the cores (`LOCAL_WORLD_SIZE`). An explicit
setting always wins: a config field such as `policy.torch_threads`, then `SEARCHRL_THREADS`,
then `OMP_NUM_THREADS`.

A CPU vLLM engine runs in processes of its own, which inherit `OMP_NUM_THREADS` when they
start: with the command's 2 threads exported, 16 rollouts on the idle 2-core Xeon took 409 s of
generation against 57 s with 1, because the worker bound to one core ran two spinning OpenMP
threads on it. `engine_threads` gives the engine's processes one thread per core they are bound
to, whatever the command itself uses.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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
    return len(_core_ids())


def _core_ids() -> list[int]:
    """The ids of the cores this process may be scheduled on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0)) or [0]
    return list(range(max(1, os.cpu_count() or 1)))


def core_list(bind: str) -> str:
    """`bind` as vLLM reads `VLLM_CPU_OMP_THREADS_BIND`: `all` becomes this process's own cores
    (`0,1`), so the worker binds every one of them and vLLM's scheduler shares a core with it;
    every other value is vLLM's own and passes through."""
    if bind != "all":
        return bind
    return ",".join(str(core) for core in _core_ids())


def _cpu_times(path: str = "/proc/stat") -> dict[int, tuple[int, int]]:
    """Per CPU: (busy, total) jiffies since boot (idle and iowait count as not busy)."""
    times: dict[int, tuple[int, int]] = {}
    with open(path) as stat:
        for line in stat:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            values = [int(v) for v in fields[:8]]
            idle = values[3] + values[4]
            times[int(name[3:])] = (sum(values) - idle, sum(values))
    return times


def busy_between(
    before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]], cpus: set[int]
) -> float:
    """How many of `cpus` were busy between two `_cpu_times` snapshots (0 … len(cpus))."""
    busy = 0.0
    for cpu in cpus & before.keys() & after.keys():
        total = after[cpu][1] - before[cpu][1]
        if total > 0:
            busy += (after[cpu][0] - before[cpu][0]) / total
    return busy


def busy_cores(window_s: float = 0.25) -> float:
    """Cores of this process's affinity that other processes keep busy now; the 1-minute load
    average where /proc/stat cannot be read."""
    cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    try:
        before = _cpu_times()
        time.sleep(window_s)
        after = _cpu_times()
    except (OSError, ValueError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return busy_between(before, after, cpus or set(after))


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
    load = busy_cores() if load is None else load
    free = min(cores, max(1, int(cores - load + 0.5)))
    return ThreadChoice(free, f"{cores} cores, {load:.1f} busy")


def apply_threads(explicit: int = 0) -> ThreadChoice:
    """Choose the count and make it take effect: exported as OMP_NUM_THREADS/MKL_NUM_THREADS
    (read when torch or faiss is loaded, and inherited by child processes) and, when torch
    is already imported, set directly. Always exported: `SEARCHRL_THREADS=2` under an
    inherited `OMP_NUM_THREADS=1` left faiss's OpenMP on one thread while torch got two."""
    choice = choose_threads(explicit)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(choice.threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(choice.threads)
    _applied.append(choice)
    return choice


_applied: list[ThreadChoice] = []
"""Choices `apply_threads` made in this process, latest last."""


def current_threads() -> ThreadChoice:
    """The choice this process runs with: the one `apply_threads` made (its reason, not
    "OMP_NUM_THREADS=1", which it exported itself), else a fresh one."""
    return _applied[-1] if _applied else choose_threads()


def bound_cores(bind: str, cores: int) -> int:
    """Cores a CPU vLLM worker runs on for `VLLM_CPU_OMP_THREADS_BIND=bind` on a process with
    `cores` usable cores: `auto` keeps one for vLLM's scheduler, `all` and `nobind` use all, a
    list such as `0`, `0-1` or `0,2-3` is counted (the first rank's, before any `|`)."""
    spec = bind.strip()
    if spec == "auto":
        return max(1, cores - 1)
    if spec in ("all", "nobind"):
        return cores
    count = 0
    for part in spec.split("|")[0].split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            count += int(high) - int(low) + 1 if high else 1
        elif part.strip():
            raise ValueError(f"cannot read the core list {bind!r} (expected e.g. 0, 0-1, 0,2-3)")
    return max(1, count)


@contextmanager
def engine_threads(threads: int) -> Iterator[None]:
    """Processes started inside the block (an engine's) run `threads` OpenMP/MKL threads; this
    process's own environment and torch threads are restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({name: str(threads) for name in saved})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
