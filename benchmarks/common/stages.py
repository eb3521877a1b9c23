"""What the resumable benchmarks (`learning.py`, `search_r2.py`) share: the world shape and
rollout budgets they train and evaluate with, and how one stage (a `searchrl` CLI call with its
output in a log) is run."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

HOPS = "[0.25, 0.25, 0.25, 0.25]"
ROLLOUT = ("rollout.max_response_tokens=120", "rollout.max_obs_tokens=300",
           "rollout.max_total_tokens=2048", "rollout.max_turns=5",
           "rollout.force_answer=true")  # fmt: skip
"""The rollout settings of `tiny_cpu_grpo`, which every evaluation of the benchmarks uses (the
warm starts too), so all models are read by one protocol."""


def searchrl(*args: str) -> list[str]:
    """The CLI of this interpreter's environment."""
    return [str(Path(sys.executable).parent / "searchrl"), *args]


class Spent(NamedTuple):
    """What one stage cost: wall seconds and CPU seconds (user + system of the stage's process
    and every process it waited for: a vLLM engine's scheduler and worker count too)."""

    wall: float
    cpu: float


def call(cmd: Sequence[str], log: Path, threads: int) -> Spent:
    """Run one stage with its output in `log`. The CPU time comes from `wait4` on this stage's
    own process, so stages run side by side (`--parallel`) are not mixed up."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "SEARCHRL_THREADS": str(threads)}
    start = time.perf_counter()
    with log.open("ab") as handle:
        process = subprocess.Popen(list(cmd), stdout=handle, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    spent = Spent(time.perf_counter() - start, usage.ru_utime + usage.ru_stime)
    if process.returncode != 0:
        raise StageFailed(f"stage failed ({' '.join(cmd[:3])} …), see {log}", spent)
    return spent


class StageFailed(SystemExit):
    """A stage's command exited non-zero (or was killed); `spent` is what it cost until then."""

    def __init__(self, message: str, spent: Spent) -> None:
        super().__init__(message)
        self.spent = spent


def run_stage(times: Path, stage: str, commands: Sequence[Sequence[str]], log: Path,
              threads: int) -> None:  # fmt: skip
    """Run a stage's commands in order and add what they cost to `times`, a failed or killed
    command's included: a stage resumed after a crash then adds up to its whole cost (a seed's
    RL stage once showed 25 of its 70 minutes after an out-of-memory kill)."""
    spent: list[Spent] = []
    try:
        for cmd in commands:
            spent.append(call(cmd, log, threads))
    except StageFailed as failed:
        spent.append(failed.spent)
        raise
    finally:
        record(times, stage, spent)


@contextmanager
def stage_lock(folder: Path, stage: str, *, wait: bool = True) -> Iterator[bool]:
    """Hold `folder/.locks/<stage>` for as long as the block runs, so that two benchmark
    processes working on one seed (one per arm, each on its own core) never run the same stage
    side by side. Yields True when held; with `wait=False` it yields False at once when another
    process holds it (the caller can do other work and come back). The lock is the kernel's
    (`flock`): a killed holder releases it."""
    locks = folder / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / stage).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def record(path: Path, stage: str, spent: Sequence[Spent]) -> None:
    """Add a stage's wall and CPU seconds to the seed's `times.json` (a resumed stage adds
    up): {stage: {"wall": s, "cpu": s}}; entries written as plain seconds (older runs) are
    read as wall time. Under a lock: processes sharing a seed write the same file."""
    with stage_lock(path.parent, path.name):
        times = read_times(path)
        entry = times.get(stage, {"wall": 0.0, "cpu": 0.0})
        times[stage] = {
            "wall": entry.get("wall", 0.0) + sum(s.wall for s in spent),
            "cpu": (entry.get("cpu") or 0.0) + sum(s.cpu for s in spent),
        }
        path.write_text(json.dumps(times, indent=2) + "\n")


def read_times(path: Path) -> dict[str, dict[str, float]]:
    """`times.json` as {stage: {"wall": s, "cpu": s or None}}."""
    raw = json.loads(path.read_text()) if path.is_file() else {}
    return {k: v if isinstance(v, dict) else {"wall": float(v), "cpu": None}
            for k, v in raw.items()}  # fmt: skip


def write_summary(root: Path, lines: Sequence[str]) -> str:
    """`root/summary.md` from the summary's lines; returns the markdown."""
    table = "\n".join(lines)
    (root / "summary.md").write_text(table + "\n")
    return table


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, imported when a figure is drawn (a
    summary without plots, or a test, never pays for the import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
