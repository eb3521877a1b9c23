"""Trajectory files: JSON Lines, one `Trajectory.to_json()` object per line.

Each line holds `id, question, golden_answers, prompt, prompt_ids, segments [{role, text,
token_ids}], answer, searches, stats, metrics, reward, uid, sample, refinement`; reading a file
back gives objects equal to the ones written. Token ids are stored, so a file can be trained on
without re-tokenizing anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from searchrl.types import Trajectory


def write_trajectories(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write (overwrite) `path`; returns the number of trajectories written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for traj in trajectories:
            out.write(json.dumps(traj.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Every trajectory in `path`, in file order (blank lines are skipped)."""
    with Path(path).open(encoding="utf-8") as lines:
        return [Trajectory.from_json(json.loads(line)) for line in lines if line.strip()]
