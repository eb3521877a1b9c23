"""A stand-in refiner for the joint-optimization tests."""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.refiner import RefineOutcome
from searchrl.types import MetaDecision, Refinement, Segment, Trajectory


def fake_refiner(decision_ids: list[int]):  # type: ignore[no-untyped-def]
    """Accepts every trajectory, recording one decision of `decision_ids` after a fixed
    meta prompt (the tokens joint optimization trains on)."""

    def refine(
        trajs: Sequence[Trajectory], *, seed: int, greedy: bool, probe: bool = True
    ) -> RefineOutcome:
        for t in trajs:
            decision = MetaDecision(
                prompt="m",
                prompt_ids=[5, 6, 7, 8],
                decision=Segment("meta", "0", list(decision_ids)),
                cut_step=0,
                steps=2,
                log_odds=-1.0,
            )
            t.refinement = Refinement(False, 0, len(t.segments), -1.0, decisions=[decision])
        return RefineOutcome(final=list(trajs), originals=list(trajs), accepted=len(trajs))

    return refine
