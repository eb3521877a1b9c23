"""Joint optimization (seed 001, "Joint Optimization"): the refiner's decisions as training rows.

Each Meta-Refiner reading becomes its own sequence: the meta prompt as the prompt and the
decision as one `meta` segment, so collating with `include_meta=True` puts the loss mask on the
decision tokens only. The row belongs to the final trajectory it helped produce and carries
that trajectory's advantage (its group id is the trajectory's, but it is never part of the
group statistics).
"""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.types import Trajectory


def meta_rows(trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], list[int]]:
    """One row per recorded decision, and for each row the index of its trajectory."""
    rows: list[Trajectory] = []
    parents: list[int] = []
    for index, traj in enumerate(trajectories):
        record = traj.refinement
        for n, decision in enumerate(record.decisions if record is not None else []):
            row = Trajectory(
                id=f"{traj.id}/meta{n}",
                question=traj.question,
                golden_answers=list(traj.golden_answers),
                prompt=decision.prompt,
                prompt_ids=list(decision.prompt_ids),
                uid=traj.uid,
                sample=traj.sample,
            )
            row.append("meta", decision.decision.text, decision.decision.token_ids)
            rows.append(row)
            parents.append(index)
    return rows, parents
