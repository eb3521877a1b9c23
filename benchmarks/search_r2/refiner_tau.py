"""Refinement at every threshold τ, read off one `searchrl eval --method search-r2` run or the
trajectories a training run with the refiner kept.

    python benchmarks/search_r2/refiner_tau.py runs/r2_epyc/seed0/eval_full \
        runs/r2_epyc/seed0/eval_process
    python benchmarks/search_r2/refiner_tau.py runs/r2_epyc/seed0/full \
        # its trajectories/step_*.jsonl

An evaluation with the refiner on records, per question, the Actor's own greedy answer (refiner
off: the paper's number), the discriminator's log-odds for "revise" on that trajectory, and
the answer after refinement where log-odds > τ (the run's `refiner.margin`). A run at τ₀ thus
answers every τ ≥ τ₀ exactly, with no new generation: a trajectory revised at τ is revised at
τ₀ too, with the same regeneration, and one not revised keeps the Actor's answer. The table
gives, per run, the log-odds' ROC-AUC for the Actor's wrong answers, then per τ the share
revised, EM and its paired difference from the Actor alone with a bootstrap 95 % interval
(questions resampled), and how many revisions turned a wrong answer right or a right one wrong.

It asks whether any τ makes test-time refinement pay (the D2 question of issue 19: the paper
validates the trained Actor without the refiner). With N_max = 1 only; a run with more
revisions records the first decision's log-odds and the last trajectory's answer.

A training run's folder is read the same way from every trajectory its steps sampled (before
any were dropped from the update), the "Actor" being the sampled trajectory before refinement
(`refinement.original_em`) and τ₀ the run's `refiner.margin`: A_prec over the trajectories
revised at τ, as if training had used that τ, and the ROC-AUC of the meta prompt on the
Actor's sampled (not greedy) rollouts as RL moves it. A second table reads the same runs'
trajectories with the confidence discriminator's score, the Actor's mean surprisal as sampled
(`refiner.discriminator=confidence`): its ROC-AUC for wrong answers over the trajectories not
revised (a revised one carries its regeneration's tokens), for any training run, Search-R1's
included, and beside it the meta prompt's on the same trajectories where the run has one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from searchrl.eval.stats import paired_test
from searchrl.refiner.confidence import surprisal
from searchrl.refiner.labelled import roc_auc
from searchrl.rollout.io import read_trajectories

TAUS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)


def read(folder: Path) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(the run's τ, log-odds, the Actor's EM, the refined EM), one entry per trajectory."""
    if (folder / "samples.jsonl").is_file():
        run = json.loads((folder / "run.json").read_text())
        if run.get("method") != "search-r2":
            raise SystemExit(f"{folder}: not a search-r2 evaluation (method {run.get('method')})")
        margin = float(run.get("refiner", {}).get("margin", 0.0))
        rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        actor = [r["actor_em"] for r in rows]
        refined = [r["em"] for r in rows]
        rows = [r["trajectory"] for r in rows]
    elif (folder / "config.yaml").is_file():
        config = yaml.safe_load((folder / "config.yaml").read_text())
        margin = float(config["refiner"]["margin"])
        files = sorted((folder / "trajectories").glob("step_*.jsonl"))
        rows = [json.loads(line) for f in files for line in f.read_text().splitlines()]
        if not rows or "original_em" not in (rows[0].get("refinement") or {}):
            raise SystemExit(f"{folder}: no evaluation samples and no refined trajectories")
        actor = [r["refinement"]["original_em"] for r in rows]
        refined = [r["metrics"]["em"] for r in rows]
    else:
        raise SystemExit(f"{folder}: neither an evaluation (samples.jsonl) nor a training run")
    odds = np.array([r["refinement"]["log_odds"] for r in rows], dtype=float)
    revised = np.array([bool(r["refinement"]["revised"]) for r in rows])
    if not np.array_equal(revised, odds > margin):
        raise SystemExit(f"{folder}: revisions do not follow log-odds > τ = {margin}")
    return margin, odds, np.array(actor, dtype=float), np.array(refined, dtype=float)


def rows_for(folder: Path, taus: tuple[float, ...]) -> list[list[str]]:
    """The table rows of one evaluation or training run (thresholds below its own τ cannot be
    read)."""
    margin, odds, actor, refined = read(folder)
    auc = roc_auc(odds.tolist(), (actor == 0).tolist())
    out = []
    for tau in (t for t in taus if t >= margin):
        revised = odds > tau
        em = np.where(revised, refined, actor)
        gain = paired_test(em, actor, 4000, 0.95, 0)
        fixed = int(np.sum(revised & (actor == 0) & (refined == 1)))
        broken = int(np.sum(revised & (actor == 1) & (refined == 0)))
        a_prec = f"{np.mean(refined[revised] - actor[revised]):+.3f}" if revised.any() else "–"
        out.append([str(folder), str(odds.size), f"{auc:.3f}", f"{actor.mean():.3f}", f"{tau:g}",
                    f"{revised.mean():.2f}", f"{em.mean():.3f}",
                    f"{gain.diff:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}]", a_prec,
                    str(fixed), str(broken)])  # fmt: skip
    return out


def confidence_row(folder: Path) -> list[str] | None:
    """[run, n, wrong share, surprisal ROC-AUC, meta prompt ROC-AUC ("–" without a refiner)]
    over a training run's unrevised sampled trajectories; None for an evaluation folder."""
    files = sorted((folder / "trajectories").glob("step_*.jsonl"))
    if not files:
        return None
    scores, odds, wrong = [], [], []
    for traj in (t for f in files for t in read_trajectories(f)):
        refinement, score = traj.refinement, surprisal(traj)
        if score is None or (refinement is not None and refinement.revised):
            continue
        scores.append(score)
        before = None if refinement is None else refinement.original_em
        wrong.append((traj.metrics.get("em") if before is None else before) == 0)
        odds.append(None if refinement is None else refinement.log_odds)
    meta = "–" if None in odds else f"{roc_auc(odds, wrong):.3f}"
    return [str(folder), str(len(scores)), f"{sum(wrong) / max(len(wrong), 1):.2f}",
            f"{roc_auc(scores, wrong):.3f}", meta]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="+", type=Path, help="search-r2 evaluation folders or refiner training runs"
    )
    parser.add_argument("--taus", nargs="+", type=float, default=list(TAUS))
    args = parser.parse_args()
    table = Table("run", "n", "ROC-AUC", "Actor EM", "τ", "revised", "EM", "− Actor [95 %]",
                  "A_prec", "wrong→right", "right→wrong")  # fmt: skip
    confidence = Table("run", "unrevised", "wrong", "surprisal ROC-AUC", "meta prompt ROC-AUC")
    for folder in args.runs:
        row = confidence_row(folder)
        if row is not None:
            confidence.add_row(*row)
        if row is None or row[4] != "–":  # an evaluation, or a run with a refiner
            for line in rows_for(folder, tuple(args.taus)):
                table.add_row(*line)
    console = Console(width=200)
    console.print(table)
    console.print(confidence)


if __name__ == "__main__":
    main()
