"""The refiner's quality gate on the Actor RL starts from, with enough flawed transcripts to
read a trimmer's accuracy: each held-out question rolled out several times.

    python benchmarks/search_r2/refiner_gate.py --run runs/sft --out runs/gate --samples 4
    python benchmarks/search_r2/refiner_gate.py --run runs/sft --model runs/r2/model --out \
        runs/gate_r2
    python benchmarks/search_r2/refiner_gate.py --run runs/sft --out runs/gate_rl \
        --transcripts runs/r2/trajectories/step_*.jsonl

A `searchrl sft ... meta_rollouts=N` run reports the gate (`meta/final/*`) on one rollout per
held-out question; a strong Actor flaws few of them (19 of 100 after a second meta round), so
its trimmer accuracy rests on a handful and its ROC-AUC has a wide interval. This script rolls
the same held-out questions (`data.eval_split`, the run's world and rollout settings) out
`--samples` times with the model (sample s with seed `seed + 1 + s`: sample 0 is the run's
own `meta_final_held_out` draw), labels every rollout with the world's oracle (the earliest
step whose search missed its hop's passage, else the answer step when wrong), and reads each
under the meta prompt as RL reads it (the module, bf16 where `policy.autocast` turns it on).

Prints the gate: ROC-AUC of the raw log-odds (the RL default) and of the calibrated score,
the step count's own ROC-AUC (what a refiner that only counts steps would score), the mean
ROC-AUC within each step count, the revision rate at τ = 0, and the trimmer's exact step
next to the best constant step. Intervals are percentile-bootstrap 95 % over questions (a
question's rollouts are resampled together: they are not independent). Rollouts are kept in
`--out` per sample (`held_out_s{s}.jsonl`, labels in `metrics.flaw_step`) and read back by a
rerun; readings go to `readings.jsonl` and the table to `gate.md`. With `--transcripts` the
transcripts are instead the trajectories an RL run wrote (its train questions, labelled here
by the same oracle): transcripts no rule or reading was tuned on, read by `--model`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from math import nan
from pathlib import Path
from typing import NamedTuple

import numpy as np

from read_precision import labelled
from searchrl.config.loading import load_config
from searchrl.config.sft import SFTConfig
from searchrl.refiner.confidence import surprisal, threshold_for_share, trim_tilt
from searchrl.refiner.labelled import oracle_flaw, roc_auc
from searchrl.refiner.meta import Reading
from searchrl.refiner.rule import checked_step
from searchrl.refiner.steps import split_steps
from searchrl.train.environment import build_environment, load_policy
from searchrl.train.meta_sft import labelled_rollouts, mean_em, report_reader
from searchrl.train.metrics import save_trajectories
from searchrl.train.run import set_threads
from searchrl.types import Question, Trajectory


class Row(NamedTuple):
    """One read transcript."""

    uid: str
    """Its question (a question's draws are resampled together)."""
    reading: Reading
    """The meta prompt's reading, untilted (the paper's π_h)."""
    label: int
    """The oracle's: 0 clean, k the earliest flawed step."""
    surprisal: float
    """The Actor's mean −log π of its tokens as sampled (`refiner.confidence`); NaN if none."""
    em: float
    """Its exact match."""
    resampled: float
    """What resampling it would score: the mean EM of its question's other draws."""
    tilt: tuple[float, ...] = ()
    """The trimmer's tilt at `refiner.trim_surprisal` = 1 (ln of each step's surprisal)."""
    checked: int = 0
    """The earliest step a check of the transcript shows wrong (`checked_step`; 0: none)."""


def trimmer_exact(rows: Sequence[Row]) -> float:
    """Share of the flawed transcripts whose argmax cut is the oracle's step."""
    flawed = [(row.reading, row.label) for row in rows if row.label > 0]
    return sum(r.cut(None) == y for r, y in flawed) / len(flawed) if flawed else float("nan")


def tilted_exact(rows: Sequence[Row]) -> float:
    """`trimmer_exact` of π_h tilted by the steps' surprisal (`refiner.trim_surprisal=1`)."""
    return trimmer_exact(
        [row._replace(reading=replace(row.reading, tilt=row.tilt)) for row in rows]
    )


def checked_exact(rows: Sequence[Row]) -> float:
    """`trimmer_exact` of the checked trimmer (`refiner.trimmer=checked`): the checked step
    where a check fired, π_h's argmax elsewhere."""
    return trimmer_exact(
        [row._replace(reading=replace(row.reading, checked=row.checked)) for row in rows]
    )


def fires(flawed: bool) -> Callable[[Sequence[Row]], float]:
    """How often a check fires on the flawed (or the clean) transcripts."""
    return lambda rows: float(
        np.mean([row.checked > 0 for row in rows if (row.label > 0) == flawed])
    )


def best_constant(rows: Sequence[Row]) -> tuple[int, float]:
    """The fixed step k that would match the most oracle labels, and its share."""
    labels = [row.label for row in rows if row.label > 0]
    if not labels:
        return 0, float("nan")
    k = max(set(labels), key=labels.count)
    return k, labels.count(k) / len(labels)


def within_steps(rows: Sequence[Row]) -> float:
    """Mean ROC-AUC of the raw log-odds within each step count T that has both classes,
    weighted by transcripts: what the reading knows beyond how long a transcript is."""
    total, weight = 0.0, 0
    for steps in sorted({row.reading.steps for row in rows}):
        part = [(row.reading.log_odds, row.label > 0) for row in rows if row.reading.steps == steps]
        auc = roc_auc([s for s, _ in part], [p for _, p in part])
        if not np.isnan(auc):
            total, weight = total + auc * len(part), weight + len(part)
    return total / weight if weight else float("nan")


def auc_of(score: Callable[[Row], float]) -> Callable[[Sequence[Row]], float]:
    """ROC-AUC of `score` for the flawed class over rows."""
    return lambda rows: roc_auc([score(row) for row in rows], [row.label > 0 for row in rows])


def answer_step(row: Row) -> bool:
    """Whether the oracle's flaw is the last step: a wrong answer after sound searches (or no
    answer at all), as against a search that missed its hop's passage."""
    return row.label == row.reading.steps


def of_kind(
    answer: bool, stat: Callable[[Sequence[Row]], float]
) -> Callable[[Sequence[Row]], float]:
    """`stat` over the clean rows and the flawed ones of one kind (`answer_step` or not)."""
    return lambda rows: stat([row for row in rows if not row.label or answer_step(row) == answer])


STATS: dict[str, Callable[[Sequence[Row]], float]] = {
    "ROC-AUC raw": auc_of(lambda row: row.reading.log_odds),
    "ROC-AUC calibrated": auc_of(lambda row: row.reading.score),
    "ROC-AUC within each step count": within_steps,
    "ROC-AUC of the step count alone": auc_of(lambda row: float(row.reading.steps)),
    "ROC-AUC of the Actor's surprisal (discriminator=confidence)": auc_of(
        lambda row: row.surprisal
    ),
    "revised at τ = 0 (raw)": lambda rows: float(
        np.mean([row.reading.log_odds > 0 for row in rows])
    ),
    "trimmer exact step": trimmer_exact,
    "trimmer exact step, tilted by the steps' surprisal (trim_surprisal=1)": tilted_exact,
    "trimmer exact step, checks first (trimmer=checked)": checked_exact,
    "checks first minus π_h (paired)": lambda rows: checked_exact(rows) - trimmer_exact(rows),
    "a check fires, flawed transcripts": fires(True),
    "a check fires, clean transcripts": fires(False),
    "best constant step": lambda rows: best_constant(rows)[1],
    "ROC-AUC raw, answer-step flaws vs clean": of_kind(True, auc_of(lambda r: r.reading.log_odds)),
    "ROC-AUC raw, search-step flaws vs clean": of_kind(False, auc_of(lambda r: r.reading.log_odds)),
    "ROC-AUC surprisal, answer-step flaws vs clean": of_kind(True, auc_of(lambda r: r.surprisal)),
    "ROC-AUC surprisal, search-step flaws vs clean": of_kind(False, auc_of(lambda r: r.surprisal)),
    "trimmer exact step, answer-step flaws": of_kind(True, trimmer_exact),
    "trimmer exact step, search-step flaws": of_kind(False, trimmer_exact),
}
"""Gate statistics over (uid, reading, label) rows."""


def checks_then_constant(rows: Sequence[Row]) -> float:
    """Exact step of the checks with the best constant step where none fires: the checked
    trimmer with a reader that knows only where flaws usually are."""
    k, _ = best_constant(rows)
    flawed = [row for row in rows if row.label > 0]
    return sum((row.checked or k) == row.label for row in flawed) / len(flawed) if flawed else nan


def check_precision(rows: Sequence[Row]) -> float:
    """Of the flawed transcripts a check fired on, the share where it named the oracle's step."""
    fired = [row for row in rows if row.label > 0 and row.checked]
    return sum(row.checked == row.label for row in fired) / len(fired) if fired else nan


CHECK_STATS: dict[str, Callable[[Sequence[Row]], float]] = {
    "ROC-AUC of the Actor's surprisal (discriminator=confidence)": auc_of(
        lambda row: row.surprisal
    ),
    "a check fires, flawed transcripts": fires(True),
    "a check fires, clean transcripts": fires(False),
    "the checked step is the oracle's, where a check fired": check_precision,
    "checks first, then the best constant step": checks_then_constant,
    "best constant step": lambda rows: best_constant(rows)[1],
    "checks first minus the best constant step (paired)": lambda rows: (
        checks_then_constant(rows) - best_constant(rows)[1]
    ),
}
"""What `--checks-only` reports: the statistics that need no meta-prompt reading."""


def clustered_ci(
    rows: Sequence[Row], stat: Callable[[Sequence[Row]], float], resamples: int, seed: int
) -> tuple[float, float]:
    """Percentile-bootstrap 95 % interval of `stat`, resampling questions (all of a question's
    rollouts together)."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.uid, []).append(row)
    keys = list(groups)
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        drawn = [row for i in rng.integers(0, len(keys), len(keys)) for row in groups[keys[i]]]
        value = stat(drawn)
        if not np.isnan(value):
            values.append(value)
    if not values:
        return float("nan"), float("nan")
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def gate_table(
    rows: Sequence[Row],
    resamples: int = 1000,
    seed: int = 0,
    stats: dict[str, Callable[[Sequence[Row]], float]] = STATS,
) -> list[str]:
    """The gate as a markdown table: each statistic with its question-clustered interval."""
    flawed = sum(row.label > 0 for row in rows)
    questions = len({row.uid for row in rows})
    k, _ = best_constant(rows)
    lines = [
        f"{len(rows)} transcripts of {questions} questions, {flawed} flawed",
        "",
        "| statistic | value | 95 % (questions resampled) |",
        "|---|---:|---:|",
    ]
    for name, stat in stats.items():
        low, high = clustered_ci(rows, stat, resamples, seed)
        label = f"{name} (step {k})" if name == "best constant step" else name
        lines.append(f"| {label} | {stat(rows):.3f} | {low:.3f}–{high:.3f} |")
    return lines


def resample_gain(score: Callable[[Row], float], share: float) -> Callable[[Sequence[Row]], float]:
    """EM gained per transcript when the `share` of rows that `score` ranks highest are
    rejected and resampled (`refiner.trimmer=first`; a resample scores `Row.resampled`)."""

    def gain(rows: Sequence[Row]) -> float:
        values = [score(row) for row in rows]
        cut = float(np.quantile(values, 1.0 - share))
        picked = [row.resampled - row.em for row, v in zip(rows, values, strict=True) if v > cut]
        return sum(picked) / len(rows)

    return gain


def resample_table(rows: Sequence[Row], resamples: int = 1000, seed: int = 0) -> list[str]:
    """What a discriminator is worth when its rejects are resampled, at equal revision rates:
    the Actor's surprisal, the meta prompt's raw log-odds, and a random pick (gain 0 in
    expectation), each with its question-clustered interval; the last row's share is the
    flawed share (the calibrated threshold)."""
    flawed_share = sum(row.label > 0 for row in rows) / len(rows)
    lines = [
        "",
        f"Rejected and resampled (EM {np.mean([r.em for r in rows]):.3f} as drawn; a resample",
        "scores the mean EM of its question's other draws): EM gained per transcript",
        "",
        "| revised | confidence | meta prompt (raw log-odds) |",
        "|---:|---:|---:|",
    ]
    for share in (0.1, 0.2, 0.3, flawed_share):
        cells = []
        for score in (lambda r: r.surprisal, lambda r: r.reading.log_odds):
            stat = resample_gain(score, share)
            low, high = clustered_ci(rows, stat, resamples, seed)
            cells.append(f"{stat(rows):+.3f} ({low:+.3f}, {high:+.3f})")
        lines.append(f"| {share:.2f} | {cells[0]} | {cells[1]} |")
    return lines


def gate_rows(
    pairs: Sequence[tuple[Trajectory, int]], readings: Sequence[Reading | None]
) -> list[Row]:
    """One row per read transcript: its reading untilted (the paper's π_h, whatever reader
    produced it), the Actor's surprisal, its EM, what resampling it would score (the mean EM
    of its question's other draws), the trimmer's surprisal tilt at β = 1 and the step the
    checks flag."""
    draws: dict[str, list[float]] = {}
    for t, _ in pairs:
        draws.setdefault(t.uid, []).append(t.metrics.get("em", 0.0))

    def others(traj: Trajectory) -> float:
        same = draws[traj.uid]
        em = traj.metrics.get("em", 0.0)
        return (sum(same) - em) / (len(same) - 1) if len(same) > 1 else nan

    return [
        Row(t.uid, replace(r, tilt=()), y, nan if (v := surprisal(t)) is None else v,
            t.metrics.get("em", 0.0), others(t), trim_tilt(t, 1.0), checked_step(t))
        for (t, y), r in zip(pairs, readings, strict=True)
        if r is not None
    ]  # fmt: skip


def oracle_labelled(
    paths: Sequence[Path], questions: Sequence[Question]
) -> list[tuple[Trajectory, int]]:
    """The trajectories in `paths` (an RL run's `trajectories/step_*.jsonl`), each with the
    world oracle's label over its question's supporting passages; a trajectory of a question
    not in `questions` is left out."""
    support = {q.uid: q.metadata["support"] for q in questions if "support" in q.metadata}
    trajs = [Trajectory.from_json(json.loads(line))
             for path in paths for line in path.open() if line.strip()]  # fmt: skip
    return [(t, oracle_flaw(t, support[t.uid])) for t in trajs if t.uid in support]


def unread(traj: Trajectory) -> Reading:
    """A reading with the transcript's step count and no log-probabilities (`--checks-only`)."""
    return Reading("", [], [], [nan] * (len(split_steps(traj.segments)) + 1))


def kept_readings(path: Path, trajs: Sequence[Trajectory]) -> list[Reading | None] | None:
    """The readings an earlier run of the script wrote, when they are of exactly these
    transcripts (ids in order; none was unreadable), else None: reading is the costly part."""
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.open() if line.strip()]
    if [row["id"] for row in rows] != [t.id for t in trajs]:
        return None
    return [Reading("", [], [], row["logprobs"], row["prior"]) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the `searchrl sft` run folder")
    parser.add_argument("--model", default="", help="the model that rolls out and reads "
                        "(default: the run's own `model`)")  # fmt: skip
    parser.add_argument("--world", default="", help="world folder (default: the run's)")
    parser.add_argument("--out", type=Path, required=True, help="where rollouts are kept")
    parser.add_argument("--samples", type=int, default=4, help="rollouts per held-out question")
    parser.add_argument("--questions", type=int, default=0, help="held-out questions (0: all)")
    parser.add_argument("--transcripts", type=Path, nargs="+", default=[],
                        help="an RL run's trajectory files, read, not rolled out")  # fmt: skip
    parser.add_argument("--checks-only", action="store_true", help="no meta-prompt reading "
                        "(slow on a CPU): the checks and the Actor's surprisal alone")  # fmt: skip
    args = parser.parse_args()
    model_dir = args.model or str(args.run / "model")
    overrides = [f"policy.init_checkpoint={model_dir}"]
    overrides += [f"data.world_dir={args.world}"] if args.world else []
    config = load_config(SFTConfig, args.run / "config.yaml", overrides)
    set_threads(config.policy.torch_threads)
    env = build_environment(config.data, args.out)
    policy, tokenizer = load_policy(config.model, config.policy)
    questions = env.questions(config.data.eval_split)[: args.questions or None]
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = oracle_labelled(args.transcripts, env.questions(config.data.train_split))
    for s in range(0 if args.transcripts else args.samples):
        path = args.out / f"held_out_s{s}.jsonl"
        if not path.is_file():
            jobs = [(q, 1, config.seed + 1 + s) for q in questions]
            label = f"held-out rollouts {s + 1}/{args.samples}"
            done = labelled_rollouts(config, env, policy, tokenizer, jobs, label)
            save_trajectories(path, [t for t, _ in done])
        pairs += labelled(path)
    kept = args.out / "readings.jsonl"
    readings = kept_readings(kept, [t for t, _ in pairs])
    if args.checks_only:
        readings = [unread(t) for t, _ in pairs]
    elif readings is None:
        readings = report_reader(config, env, policy, tokenizer).read([t for t, _ in pairs])
        with kept.open("w") as f:
            for (t, y), r in zip(pairs, readings, strict=True):
                if r is not None:
                    f.write(json.dumps({"id": t.id, "uid": t.uid, "label": y, "prior": r.prior,
                                        "logprobs": r.logprobs}) + "\n")  # fmt: skip
    rows = gate_rows(pairs, readings)
    threshold = threshold_for_share(
        [row.surprisal for row in rows], sum(row.label > 0 for row in rows) / max(len(rows), 1)
    )
    lines = [
        f"model {model_dir}, sampled EM {mean_em(pairs):.3f}",
        *gate_table(rows, stats=CHECK_STATS if args.checks_only else STATS),
        "",
        f"refiner.confidence_threshold that revises the flawed share: {threshold:.4f}",
        *(
            resample_table(rows)
            if not args.checks_only and (args.samples > 1 or args.transcripts)
            else []
        ),
    ]
    print("\n".join(lines))
    (args.out / "gate.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
