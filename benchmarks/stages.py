"""What the resumable benchmarks (`learning.py`, `search_r2.py`) share: the world shape and
rollout budgets they train and evaluate with, and how one stage (a `searchrl` CLI call with its
output in a log) is run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HOPS = "[0.25, 0.25, 0.25, 0.25]"
ROLLOUT = ("rollout.max_response_tokens=120", "rollout.max_obs_tokens=300",
           "rollout.max_total_tokens=2048", "rollout.max_turns=5",
           "rollout.force_answer=true")  # fmt: skip
"""The rollout settings of `tiny_cpu_grpo`, which every evaluation of the benchmarks uses (the
warm starts too), so all models are read by one protocol."""


def searchrl(*args: str) -> list[str]:
    """The CLI of this interpreter's environment."""
    return [str(Path(sys.executable).parent / "searchrl"), *args]


def call(cmd: Sequence[str], log: Path, threads: int) -> float:
    """Run one stage with its output in `log`; returns its wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "SEARCHRL_THREADS": str(threads)}
    start = time.perf_counter()
    with log.open("ab") as handle:
        code = subprocess.run(
            list(cmd), stdout=handle, stderr=subprocess.STDOUT, env=env
        ).returncode
    if code != 0:
        raise SystemExit(f"stage failed ({' '.join(cmd[:3])} …), see {log}")
    return time.perf_counter() - start
