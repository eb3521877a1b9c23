"""The diagnostic probes of a refining pass (generated, scored, never trained on): J_trim
probes on a share of the accepted trajectories (for the selection precision A_prec), and a
baseline-cut twin of every first-round trim (for S_trim). Their time is kept apart from the
refiner's."""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING

from searchrl.refiner.meta import Reading, average_cut, draw_step
from searchrl.refiner.outcome import RefineOutcome
from searchrl.refiner.steps import regeneration_seed
from searchrl.rollout.sampler import row_seed

if TYPE_CHECKING:
    from searchrl.refiner.refiner import MetaRefiner


def run_probes(
    refiner: MetaRefiner,
    outcome: RefineOutcome,
    readings: dict[int, Reading],
    seed: int,
    greedy: bool,
) -> None:
    """J_trim probes on a share of the accepted, and a baseline-cut twin of every first
    trim, its cut drawn from the batch-average cut distribution (`average_cut`)."""
    started = time.perf_counter()
    accepted = sorted(i for i, r in readings.items() if i not in outcome.trims)
    picker = random.Random(row_seed(seed, "probe", 0))
    # ceil: a share of a small batch must still probe someone (round(0.5 * 1) is 0)
    n_probe = math.ceil(refiner.config.probe_share * len(accepted))
    outcome.probed = sorted(picker.sample(accepted, n_probe))
    regen_seed = regeneration_seed(seed, 0)
    jobs: list[tuple[str, int, int]] = []
    for i in outcome.probed:
        jobs.append(("trim", i, refiner.trim(outcome.originals[i], readings[i], seed, 0, greedy)))
    if refiner.baseline_cuts:
        average = average_cut([refiner.cut_distribution(r) for r in readings.values()])
        for i in sorted([*outcome.trims, *outcome.probed]):
            jobs.append(("random", i, draw_step(average[: readings[i].steps], picker)))
    regenerated = refiner.regenerate_cuts(
        [outcome.originals[i] for _, i, _ in jobs], [k for _, _, k in jobs], regen_seed
    )
    for (kind, i, _), traj in zip(jobs, regenerated, strict=True):
        (outcome.trims if kind == "trim" else outcome.random_cuts)[i] = traj
    outcome.probe_s = time.perf_counter() - started
