"""What one pass of the Meta-Refiner over a batch produced: the final trajectories, the
originals they came from, the diagnostic probes and the seconds each part took."""

from __future__ import annotations

from dataclasses import dataclass, field

from searchrl.types import Trajectory


@dataclass
class RefineOutcome:
    """Final trajectories (aligned with the input) and what the diagnostics need."""

    final: list[Trajectory]
    originals: list[Trajectory]
    """The trajectories as the Actor generated them, aligned with `final`."""
    trims: dict[int, Trajectory] = field(default_factory=dict)
    """Index → the original regenerated from the trimmer's first-round cut (revised ones, and
    the accepted ones probed for J_trim)."""
    random_cuts: dict[int, Trajectory] = field(default_factory=dict)
    """Index → the original regenerated from a baseline cut (drawn from the batch-average cut
    distribution), same seed as its trim."""
    probed: list[int] = field(default_factory=list)
    """Indices of accepted trajectories that were trimmed only to estimate J_trim."""
    accepted: int = 0
    """Trajectories accepted at their first reading."""
    refine_s: float = 0.0
    """Seconds of Algorithm 1: reading (`read_s`) plus cutting and regenerating."""
    read_s: float = 0.0
    """Seconds spent reading trajectories under the meta prompt (the scoring forwards)."""
    probe_s: float = 0.0
    probes_ran: bool = True
    """False when the probes were skipped (a dynamic-sampling top-up round): its accepted
    trajectories then stand for nothing in A_prec, so the round is left out of A_prec and
    S_trim (its revisions still count)."""

    def unscored(self) -> list[Trajectory]:
        """Probe and original trajectories that are not final ones (each scored once)."""
        finals = {id(t) for t in self.final}
        seen: set[int] = set()
        out = []
        for traj in [*self.originals, *self.trims.values(), *self.random_cuts.values()]:
            if id(traj) not in finals and id(traj) not in seen:
                seen.add(id(traj))
                out.append(traj)
        return out
