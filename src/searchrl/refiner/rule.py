"""The rule baseline of the discriminator (`refiner.discriminator: rule`, not in the paper):
what a refiner that reads no model would revise. It reads no gold answer, so it is fair at
evaluation too."""

from __future__ import annotations

from searchrl.types import Trajectory


def rule_revise(traj: Trajectory) -> bool:
    """The rule-based discriminator: no answer, or a search that returned no passage or only
    passages an earlier search of the trajectory had already returned."""
    if traj.answer is None:
        return True
    seen: set[str] = set()
    for call in traj.searches:
        new = set(call.doc_ids) - seen
        if not new:
            return True
        seen |= new
    return False
