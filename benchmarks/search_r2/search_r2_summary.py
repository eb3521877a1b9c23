"""Tables and plot of `benchmarks/search_r2/search_r2.py`: the refiner's quality before RL, held-out
EM of every arm with its paired gain over Search-R1 (G), the Meta-Refiner's training diagnostics and
the per-step overhead.

Paired gains: per seed, the arm's per-question EM minus Search-R1 (G)'s on the same held-out
questions, with a 95% paired bootstrap interval; over seeds, a two-level bootstrap (seeds
resampled, then questions within each seed), so the interval carries the seed-to-seed spread
as well as the question sample.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # stages.py
from searchrl.eval.stats import paired_test
from stages import pyplot, read_times, write_summary

BASELINE = "r1_g"
RANDOM_CUT = "random_cut"
S_TRIM = "refiner/s_trim"
QUALITY = (("roc_auc", "ROC-AUC"), ("roc_auc_raw", "ROC-AUC raw"),
           ("trimmer_exact_step", "trimmer exact"),
           ("trimmer_exact_step_checked", "checks first"), ("trimmer_first_step", "always first"),
           ("trimmer_last_step", "always last"), ("trimmer_best_constant", "best constant"),
           ("discriminator_accuracy", "acc τ=0"),
           ("discriminator_recall", "recall"), ("discriminator_specificity", "specificity"),
           ("revision_rate", "revised τ=0"), ("tau_for_flawed_share", "τ at flawed share"),
           ("flawed_share", "flawed"), ("labelled", "n"))  # fmt: skip
DIAGNOSTICS = ("refiner/a_prec", "refiner/v_inter", "refiner/s_trim", "refiner/s_trim_n",
               "refiner/revision_wrong_to_right", "refiner/revision_right_to_wrong",
               "critic/score/mean")  # fmt: skip


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _cell(values: Sequence[float | None], fmt: str = ".3f") -> str:
    found = [v for v in values if v is not None and v == v]
    if not found:
        return "–"
    if len(found) == 1:
        return format(found[0], fmt)
    return f"{statistics.fmean(found):{fmt}} ± {statistics.stdev(found):{fmt}}"


def per_question(folder: Path, key: str) -> dict[str, float] | None:
    """Question id → its `key` (`em`, or `actor_em` for the Actor alone) in an evaluation."""
    rows = _rows(folder / "samples.jsonl")
    if not rows:
        return None
    if key not in rows[0]:
        key = "em"  # a search-r1 evaluation: the Actor alone is all there is
    return {r["id"]: float(r[key]) for r in rows}


def two_level_gain(diffs: Sequence[np.ndarray], resamples: int = 4000) -> tuple[float, ...]:
    """Mean per-question difference over seeds and its 95% interval, seeds and questions
    resampled (a seed drawn twice contributes twice)."""
    rng = np.random.default_rng(0)
    means = []
    for _ in range(resamples):
        picked = rng.integers(0, len(diffs), len(diffs))
        draws = [diffs[i][rng.integers(0, len(diffs[i]), len(diffs[i]))] for i in picked]
        means.append(float(np.mean(np.concatenate(draws))))
    mean = float(np.mean(np.concatenate(list(diffs))))
    return mean, float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _quality(root: Path, seeds: Sequence[int], warm_start: Path | None) -> list[str]:
    lines = ["Refiner quality before RL, held-out own rollouts of the warm-started Actor "
             "(oracle labels), then held-out corrupted references (synthetic):", "",
             "| seed | set | " + " | ".join(name for _, name in QUALITY) + " |",
             "|---|---|" + "---|" * len(QUALITY)]  # fmt: skip
    # A shared warm start is one refiner for every seed: one row, not a copy per seed.
    sfts = [("all", warm_start)] if warm_start else [(s, root / f"seed{s}" / "sft") for s in seeds]
    for seed, sft in sfts:
        summary = _json(sft / "summary.json") or {}
        for label, prefix in (("own rollouts", "meta/"), ("synthetic", "meta/synthetic/")):
            cells = [summary.get(prefix + key) for key, _ in QUALITY]
            text = ["–" if c is None else f"{c:.3g}" for c in cells]
            lines.append(f"| {seed} | {label} | " + " | ".join(text) + " |")
    return lines


def _em_rows(root: Path, seeds: Sequence[int], arms: Sequence[str], labels: dict[str, str],  # type: ignore[no-untyped-def]
             warm_start: Path | None):  # fmt: skip
    """Per arm and way of evaluating: EM per seed and the paired gain over Search-R1 (G)."""
    from search_r2 import eval_sft_dir

    out = []
    ways = [("eval_sft", "SFT warm start", "em")]
    for arm in arms:
        ways.append((f"eval_{arm}", labels[arm], "actor_em"))
        if not arm.startswith("r1_"):
            ways.append((f"eval_{arm}", f"{labels[arm]}, refined at test time", "em"))
    for stage, label, key in ways:
        ems, gains, diffs = [], [], []
        for seed in seeds:
            d = root / f"seed{seed}"
            folder = eval_sft_dir(root, warm_start, seed) if stage == "eval_sft" else d / stage
            mine, base = per_question(folder, key), per_question(d / f"eval_{BASELINE}", "em")
            ems.append(statistics.fmean(mine.values()) if mine else None)
            if mine and base and stage != f"eval_{BASELINE}":
                ids = sorted(mine.keys() & base.keys())
                a, b = [mine[i] for i in ids], [base[i] for i in ids]
                gains.append(paired_test(a, b, 4000, 0.95, seed))
                diffs.append(np.asarray(a) - np.asarray(b))
        out.append((label, ems, gains, two_level_gain(diffs) if diffs else None))
    return out


def _em_table(
    root: Path, seeds: Sequence[int], arms: Sequence[str], warm_start: Path | None
) -> list[str]:
    from search_r2 import ARMS

    labels = {a: ARMS[a][0] for a in arms}
    lines = [f"Held-out EM (greedy); gain = paired per-question difference from "
             f"{labels.get(BASELINE, BASELINE)} with a 95% interval (per seed: paired bootstrap; "
             "pooled: seeds and questions resampled). Refiner arms are read twice: the trained "
             "Actor alone (refiner off, the paper's number) and with test-time refinement.", "",
             "| model | EM (mean ± std over seeds) | gain per seed | pooled gain |",
             "|---|---|---|---|"]  # fmt: skip
    for label, ems, gains, pooled in _em_rows(root, seeds, arms, labels, warm_start):
        per_seed = "; ".join(f"{g.diff:+.3f} [{g.low:+.3f}, {g.high:+.3f}]" for g in gains)
        pool = "–" if pooled is None else f"{pooled[0]:+.3f} [{pooled[1]:+.3f}, {pooled[2]:+.3f}]"
        lines.append(f"| {label} | {_cell(ems)} | {per_seed or '–'} | {pool} |")
    return lines


def _train_mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = [m[key] for m in metrics if m.get("step", 0) > 0 and key in m]
    return statistics.fmean(values) if values else None


def _diagnostics(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    from search_r2 import ARMS

    lines = ["Training diagnostics, mean over steps and seeds (ΔJ = A_prec + V_inter·S_trim; "
             "S_trim against the trimmer's batch-average cut):", "",
             "| arm | " + " | ".join(k.removeprefix("refiner/") for k in DIAGNOSTICS) + " |",
             "|---|" + "---|" * len(DIAGNOSTICS)]  # fmt: skip
    for arm in arms:
        if arm.startswith("r1_"):
            continue
        runs = [_rows(root / f"seed{s}" / arm / "metrics.jsonl") for s in seeds]
        cells = [_cell([_train_mean(run, k) for run in runs if run]) for k in DIAGNOSTICS]
        lines.append(f"| {ARMS[arm][0]} | " + " | ".join(cells) + " |")
    return lines


def s_trim_above(
    arm: Sequence[Sequence[float]], floor: Sequence[Sequence[float]], resamples: int = 4000
) -> tuple[float, float, float] | None:
    """Mean over seeds of (an arm's mean per-step S_trim − the floor arm's), with a 95% interval
    from resampling each arm's steps within each seed (the arms' batches differ after step 1,
    so their steps are not paired). Seeds lacking either arm are left out; None if all are."""
    pairs = [(np.asarray(a), np.asarray(f)) for a, f in zip(arm, floor, strict=True) if a and f]
    if not pairs:
        return None
    rng = np.random.default_rng(0)
    draws = np.zeros(resamples)
    for a, f in pairs:
        mine = rng.choice(a, (resamples, a.size)).mean(1)
        base = rng.choice(f, (resamples, f.size)).mean(1)
        draws += mine - base
    draws /= len(pairs)
    point = statistics.fmean(float(a.mean() - f.mean()) for a, f in pairs)
    low, high = np.quantile(draws, [0.025, 0.975])
    return point, float(low), float(high)


def _above_random(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    """The issue's test of the trimmer: S_trim above the random-cut arm's, per refiner arm."""
    from search_r2 import ARMS

    def steps(arm: str, seed: int) -> list[float]:
        rows = _rows(root / f"seed{seed}" / arm / "metrics.jsonl")
        return [m[S_TRIM] for m in rows if m.get("step", 0) > 0 and S_TRIM in m]

    floor = [steps(RANDOM_CUT, s) for s in seeds]
    lines = ["S_trim above the random-cut arm's (mean over seeds of the per-step means' "
             "difference; 95% interval with steps resampled within seeds):", "",
             "| arm | S_trim − random cut | seeds |", "|---|---|---|"]  # fmt: skip
    for arm in arms:
        if arm.startswith("r1_") or arm == RANDOM_CUT:
            continue
        mine = [steps(arm, s) for s in seeds]
        found = s_trim_above(mine, floor)
        if found is not None:
            used = [str(s) for s, a, f in zip(seeds, mine, floor, strict=True) if a and f]
            lines.append(f"| {ARMS[arm][0]} | {found[0]:+.3f} [{found[1]:+.3f}, {found[2]:+.3f}] "
                         f"| {', '.join(used)} |")  # fmt: skip
    return lines


def _overhead(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    """Seconds per RL step of each refiner arm against Search-R1 (G), by stage; the
    diagnostic probes (not in the paper) are timed apart and taken out."""
    lines = ["| seed | arm | R1 s/step (gen / update) | s/step (gen / refine / probes / update) | "
             "overhead | overhead without probes |", "|---|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        r1 = _rows(root / f"seed{seed}" / BASELINE / "metrics.jsonl")
        base = _train_mean(r1, "timing_s/step")
        if base is None:
            continue
        r1_parts = [_train_mean(r1, k) or 0.0 for k in ("timing_s/gen", "timing_s/update_actor")]
        for arm in (a for a in arms if not a.startswith("r1_")):
            r2 = _rows(root / f"seed{seed}" / arm / "metrics.jsonl")
            step = _train_mean(r2, "timing_s/step")
            if step is None:
                continue
            probes = _train_mean(r2, "refiner/probe_s") or 0.0
            r2_parts = [_train_mean(r2, "timing_s/gen") or 0.0,
                        _train_mean(r2, "refiner/refine_s") or 0.0, probes,
                        _train_mean(r2, "timing_s/update_actor") or 0.0]  # fmt: skip
            parts = [" / ".join(f"{x:.0f}" for x in p) for p in (r1_parts, r2_parts)]
            over, bare = step / base - 1, (step - probes) / base - 1
            lines.append(f"| {seed} | {arm} | {base:.0f} ({parts[0]}) | {step:.0f} ({parts[1]}) | "
                         f"{over:+.0%} | {bare:+.0%} |")  # fmt: skip
    return lines


def summarize(
    root: Path, seeds: Sequence[int], arms: Sequence[str], warm_start: Path | None = None
) -> str:
    """`summary.md` (all tables) and `search_r2.png`; returns the markdown. `warm_start`: the
    one warm start every seed started from (`--warm-start`), else each seed's own."""
    lines = [f"Seeds: {', '.join(map(str, seeds))}.", "", *_quality(root, seeds, warm_start), ""]
    lines += [*_em_table(root, seeds, arms, warm_start), "", *_diagnostics(root, seeds, arms), ""]
    lines += [*_above_random(root, seeds, arms), ""]
    lines += ["Per-step cost at equal G:", "", *_overhead(root, seeds, arms), ""]
    lines += ["Wall minutes per stage:", ""]
    for seed in seeds:
        times = read_times(root / f"seed{seed}" / "times.json")
        spent = (f"{k} {v['wall'] / 60:.1f}" for k, v in times.items())
        lines.append(f"- seed {seed}: " + ", ".join(spent))
    _plot(root, seeds, arms)
    return write_summary(root, lines)


def _plot(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> None:
    """Held-out EM per arm (Actor alone and refined) and A_prec, V_inter, S_trim per step."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    names = [f"eval_{a}" for a in arms]
    for offset, key in ((-0.2, "actor_em"), (0.2, "em")):
        means = []
        for name in names:
            found = [per_question(root / f"seed{s}" / name, key) for s in seeds]
            means.append(
                statistics.fmean([statistics.fmean(f.values()) for f in found if f] or [0])
            )
        label = "Actor alone" if key == "actor_em" else "refined at test time"
        axes[0].bar([i + offset for i in range(len(names))], means, width=0.4, label=label)
    axes[0].set_xticks(range(len(names)), list(arms), rotation=30, ha="right", fontsize=8)
    axes[0].set_ylabel("held-out EM")
    axes[0].legend(fontsize=8)
    for ax, key in zip(
        axes[1:], ("refiner/a_prec", "refiner/v_inter", "refiner/s_trim"), strict=True
    ):
        for arm in arms:
            if arm.startswith("r1_"):
                continue
            runs = [_rows(root / f"seed{s}" / arm / "metrics.jsonl") for s in seeds]
            series = [[m[key] for m in run if m.get("step", 0) > 0 and key in m] for run in runs]
            length = min((len(s) for s in series if s), default=0)
            if length:
                ax.plot(range(1, length + 1),
                        [statistics.fmean(s[i] for s in series if s) for i in range(length)],
                        label=arm)  # fmt: skip
        ax.set_title(key.split("/")[-1])
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(root / "search_r2.png", dpi=110)
    plt.close(fig)
