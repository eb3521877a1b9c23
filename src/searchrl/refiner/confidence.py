"""The Actor's own confidence as the refiner's discriminator (`refiner.discriminator:
confidence`), a departure from the paper's meta-prompt discriminator.

A trajectory's surprisal is the mean of −log π(token) over the tokens the Actor wrote, as the
engine recorded them while sampling (the rollout's logprobs: free, no reading). On the tour's
warm start it ranked the Actor's own held-out rollouts flawed-above-clean at ROC-AUC 0.89 (400
transcripts, four draws per question), where the trained meta prompt read 0.63 on the same
(docs/search_r2.md): a small Actor that wrote something it was unsure of has usually gone
wrong, and it knows when it is unsure better than it can say so under a second prompt.

The score the discriminator thresholds is ln(surprisal / `refiner.confidence_threshold`), a
log-ratio, so τ keeps its meaning of "revise iff score > τ" and moves the threshold by a
factor e^τ. The threshold is the Actor's own: an Actor's surprisal falls as it sharpens (the
median clean rollout's was 0.016 nats a token before a meta phase's replay and 0.005 after),
so a warm start reports the one that matches its held-out flawed share
(`meta/final/confidence/threshold_for_flawed_share` in `summary.json`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from searchrl.refiner.steps import split_steps
from searchrl.types import Trajectory

FLOOR = 1e-6
"""Surprisal floor (nats a token) so that the log-ratio of a certain trajectory is finite."""


def surprisal(traj: Trajectory) -> float | None:
    """Mean −log-probability of the tokens the Actor wrote (its `policy` segments), None when
    the engine recorded none (a trajectory that was never sampled, or a backend whose
    log-probabilities were incomplete)."""
    logprobs = [x for s in traj.segments if s.role == "policy" for x in (s.logprobs or ())]
    if not logprobs:
        return None
    return -sum(logprobs) / len(logprobs)


def step_surprisal(traj: Trajectory) -> list[float] | None:
    """Each step's largest token surprisal (−log π of the least expected token the Actor
    wrote in that step), None when a step has no recorded log-probabilities. A flawed step
    tends to hold one token the Actor hesitated over (a guessed entity, a wrong answer),
    which a mean over the step's many formulaic tokens dilutes."""
    out = []
    for step in split_steps(traj.segments):
        if not step.policy.logprobs:
            return None
        out.append(-min(step.policy.logprobs))
    return out


def trim_tilt(traj: Trajectory, beta: float) -> tuple[float, ...]:
    """β · ln s_k for the steps 1..T (the trimmer's tilt), empty for β = 0 or unknown s_k."""
    values = step_surprisal(traj) if beta > 0 else None
    if values is None:
        return ()
    return tuple(beta * math.log(max(v, FLOOR)) for v in values)


def confidence_score(traj: Trajectory, threshold: float) -> float | None:
    """ln(surprisal / threshold): > 0 where the Actor was less sure than the threshold."""
    value = surprisal(traj)
    if value is None:
        return None
    return math.log(max(value, FLOOR) / threshold)


def threshold_for_share(values: Sequence[float], share: float) -> float:
    """The surprisal threshold above which a `share` of `values` lies (the warm start's
    calibration: revise as many as are flawed). NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    keep = min(max(round(len(ordered) * (1.0 - share)), 1), len(ordered))
    return ordered[keep - 1]
