"""The decomposition of the Meta-Refiner's gain that the paper proposes (seed 001, "Theoretical
Decomposition") measured on every step's scored trajectories:

    ΔJ = A_prec + V_inter · S_trim,  A_prec = Cov(α(y), R(y) − J_trim(y)).

- V_inter (`refiner/v_inter`): 1 − Z_acc, the share of read trajectories rejected at their
  first reading; `refiner/accept_rate` is Z_acc, `refiner/revision_rate` the share of all
  trajectories that ended revised.
- A_prec (`refiner/a_prec`): α = 1 for accepted, 0 for revised trajectories; J_trim(y) is one
  sample of the reward after trimming y once: the first trim's regeneration for revised ones
  (not the final trajectory, which under N_max > 1 may have been trimmed again), the J_trim
  probe for the probed accepted ones, which stand for all accepted ones (importance weight
  accepted / probed).
- S_trim (`refiner/s_trim`): mean R(regenerated from the trimmer's cut) − R(regenerated from a
  baseline cut with the same seed), over every trajectory trimmed in the first round. The
  baseline cut is drawn from the trimmer's batch-average cut distribution, so the mean
  estimates Σ_k E[π_h(k)·G_k] − Σ_k E[π_h(k)]·E[G_k] = Σ_k Cov(π_h(k), G_k), the paper's
  S_trim: cutting where the trimmer usually cuts earns nothing, only cutting where *this*
  trajectory went wrong does. Where the paper's S_trim counts rejected trajectories only, the
  probes add accepted ones: the trimmer's skill does not depend on who was rejected, and a
  small batch then still measures it.
- `refiner/revision_{wrong_to_right,right_to_wrong,unchanged}`: counts of revised
  trajectories by exact match before → after.
A round whose probes were skipped (`RefineOutcome.probes_ran`, dynamic sampling's top-up
rounds) adds to the revision counts and rates but not to A_prec or S_trim.
A quantity without data in a step is logged as 0 with its count (`…_n`) at 0.
"""

from __future__ import annotations

import math

from searchrl.refiner.outcome import RefineOutcome
from searchrl.types import Trajectory


def _score(traj: Trajectory) -> float:
    return float(traj.reward.get("score", 0.0))


def _em(traj: Trajectory) -> float:
    return float(traj.metrics.get("em", 0.0))


def weighted_cov(alpha: list[float], gap: list[float], weights: list[float]) -> float:
    """Cov_w(α, gap) = E_w[α·gap] − E_w[α]·E_w[gap] (0 without weight)."""
    total = sum(weights)
    if total <= 0:
        return 0.0
    mean_a = sum(w * a for w, a in zip(weights, alpha, strict=True)) / total
    mean_g = sum(w * g for w, g in zip(weights, gap, strict=True)) / total
    joint = sum(w * a * g for w, a, g in zip(weights, alpha, gap, strict=True)) / total
    return joint - mean_a * mean_g


def refiner_metrics(outcomes: list[RefineOutcome]) -> dict[str, float]:
    """`refiner/*` metrics over one step's (scored) outcomes."""
    n = read = accepted = revisions = 0
    counts = {"wrong_to_right": 0, "right_to_wrong": 0, "unchanged": 0}
    alpha: list[float] = []
    gap: list[float] = []
    weights: list[float] = []
    skill: list[float] = []
    log_odds: list[float] = []
    refine_s = read_s = probe_s = 0.0
    for out in outcomes:
        n += len(out.final)
        accepted += out.accepted
        refine_s, probe_s = refine_s + out.refine_s, probe_s + out.probe_s
        read_s += out.read_s
        n_accepted_probed = out.accepted / max(len(out.probed), 1)
        for i, (orig, final) in enumerate(zip(out.originals, out.final, strict=True)):
            record = final.refinement
            if record is None or not record.decisions:
                continue
            read += 1
            if math.isfinite(record.log_odds):  # −inf: nothing to score (no log-probs)
                log_odds.append(record.log_odds)
            revisions += record.revisions
            if record.revised:
                before, after = _em(orig) > 0, _em(final) > 0
                key = "wrong_to_right" if after else "right_to_wrong"
                key = "unchanged" if before == after else key
                counts[key] += 1
                if not out.probes_ran:
                    continue
                alpha.append(0.0)
                gap.append(_score(orig) - _score(out.trims.get(i, final)))
                weights.append(1.0)
            elif i in out.probed:
                alpha.append(1.0)
                gap.append(_score(orig) - _score(out.trims[i]))
                weights.append(n_accepted_probed)
            if i in out.random_cuts and i in out.trims:
                skill.append(_score(out.trims[i]) - _score(out.random_cuts[i]))
    revised = sum(counts.values())
    metrics = {
        "refiner/revision_rate": revised / max(n, 1),
        "refiner/accept_rate": accepted / max(read, 1),
        "refiner/v_inter": 1.0 - accepted / read if read else 0.0,
        "refiner/revisions_per_trajectory": revisions / max(n, 1),
        "refiner/log_odds_mean": sum(log_odds) / max(len(log_odds), 1),
        "refiner/a_prec": weighted_cov(alpha, gap, weights),
        "refiner/a_prec_n": float(len(alpha)),
        "refiner/s_trim": sum(skill) / max(len(skill), 1),
        "refiner/s_trim_n": float(len(skill)),
        "refiner/refine_s": refine_s,
        "refiner/read_s": read_s,
        "refiner/probe_s": probe_s,
    }
    metrics.update({f"refiner/revision_{k}": float(v) for k, v in counts.items()})
    return metrics
