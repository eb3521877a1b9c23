"""The tables and the PNG of `benchmarks/training/learning.py --summarize`: per-seed EM with Wilson
intervals, the mean over seeds, paired gains (each model against its warm start, each lever arm
against the recipe), the stages' times and the per-step curves. Read-only over the run folder,
so it can run while the benchmark is still writing."""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # stages.py
from learning_arms import ARMS
from learning_signal import pass_table, signal_table
from searchrl.eval.stats import PairedResult, paired_test, proportion_ci, t_interval
from stages import pyplot, read_times, write_summary


def _rows(folder: Path) -> list[dict] | None:  # type: ignore[type-arg]
    path = folder / "samples.jsonl"
    if not path.is_file():
        return None
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _summary(folder: Path) -> dict | None:  # type: ignore[type-arg]
    path = folder / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _em(summary: dict | None, hop: int | None = None) -> float | None:  # type: ignore[type-arg]
    """Overall EM (or EM of one hop stratum) of a `searchrl eval` summary."""
    if summary is None:
        return None
    if hop is None:
        return summary["overall"]["em"]["mean"]
    stratum = summary.get("by_hops", {}).get(str(hop))
    return None if stratum is None else stratum["em"]["mean"]


def behaviour_flags(row: dict) -> tuple[bool, bool]:  # type: ignore[type-arg]
    """(valid format, answered) of one evaluation row: read from the flags an archive keeps,
    else from the trajectory's text."""
    if "valid_format" in row:
        return bool(row["valid_format"]), bool(row["answered"])
    from searchrl.reward.format import is_valid_sequence

    text = "".join(s["text"] for s in row["trajectory"]["segments"])
    return is_valid_sequence(text), row["trajectory"]["answer"] is not None


def _behaviour(folder: Path) -> tuple[float, float, str] | None:
    """(valid-format share, answered share, searches per question by hop) of an evaluation,
    read from its per-sample file."""
    rows = _rows(folder)
    if not rows:
        return None
    flags = [behaviour_flags(r) for r in rows]
    valid = statistics.fmean(v for v, _ in flags)
    answered = statistics.fmean(a for _, a in flags)
    summary = _summary(folder) or {}
    by_hops = summary.get("by_hops", {})
    searches = "/".join(f"{by_hops[h]['searches']['mean']:.2f}" if h in by_hops else "–"
                        for h in ("1", "2", "3", "4"))  # fmt: skip
    return valid, answered, searches


def _paired(folder: Path, after: str, before: str) -> tuple[list[float], list[float]] | None:
    """Per-question EM of two finished evaluations of the same questions, in id order (None
    until both have finished: an evaluation still writing has a partial samples file and no
    summary yet, and pairing it would report a gain on the questions answered so far)."""
    if _summary(folder / after) is None or _summary(folder / before) is None:
        return None
    a, b = _rows(folder / after), _rows(folder / before)
    if a is None or b is None:
        return None
    ea, eb = {r["id"]: float(r["em"]) for r in a}, {r["id"]: float(r["em"]) for r in b}
    ids = sorted(ea.keys() & eb.keys())
    return [ea[i] for i in ids], [eb[i] for i in ids]


def paired_gain(folder: Path, after: str, before: str, seed: int) -> PairedResult | None:
    """Per-question EM of `after` minus `before` on the same questions, with its 95% paired
    bootstrap interval (None until both evaluations have finished)."""
    pair = _paired(folder, after, before)
    return None if pair is None else paired_test(*pair, 4000, 0.95, seed)


def both_worlds_gain(folder: Path, arm: str, warm: str, seed: int) -> PairedResult | None:
    """An arm against its warm start on the seed's own held-out questions and the unseen
    world's together (400 paired questions with the defaults): the per-seed evidence."""
    own = _paired(folder, f"eval_{arm}", f"eval_{warm}")
    unseen = _paired(folder, f"evalx_{arm}", f"evalx_{warm}")
    if own is None or unseen is None:
        return None
    return paired_test(own[0] + unseen[0], own[1] + unseen[1], 4000, 0.95, seed)


def _mean_std(values: Sequence[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "–"
    if len(found) == 1:
        return f"{found[0]:.3f}"
    return f"{statistics.fmean(found):.3f} ± {statistics.stdev(found):.3f}"


def _models(arms: Sequence[str], curve: Sequence[int] = ()) -> list[tuple[str, str, str | None]]:
    """(label, evaluation folder, the evaluation it is paired against) in table order: every
    model on the seed's own world, then on the world it never saw."""
    out: list[tuple[str, str, str | None]] = [("SFT warm start", "eval_sft", None)]
    if "weak" in arms:
        out.append(("weak SFT warm start", "eval_sft_weak", None))
    out += [(f"SFT on {n} references", f"eval_sft_{n}", None) for n in curve]
    for arm in arms:
        label, warm, _ = ARMS[arm]
        out.append((label, f"eval_{arm}", f"eval_{warm}"))
    unseen = [(f"{label}, unseen world", name.replace("eval_", "evalx_", 1),
               None if base is None else base.replace("eval_", "evalx_", 1))
              for label, name, base in out]  # fmt: skip
    return out + unseen


def _pairs(arms: Sequence[str]) -> list[tuple[str, str, str]]:
    """(label, evaluation, the one it is paired against): every model against its start, the
    weak start's RL against the full SFT (what RL is worth in references), and every lever arm
    against the recipe on the same questions (what the lever did, not two noisy gains)."""
    out = [(label, name, base) for label, name, base in _models(arms) if base is not None]
    if "weak" in arms:
        out.append(("RL from the weak warm start vs the full SFT", "eval_weak", "eval_sft"))
    if "recipe" in arms:
        for prefix, where in (("eval", ""), ("evalx", ", unseen world")):
            out += [(f"{ARMS[a][0]} vs the recipe{where}", f"{prefix}_{a}", f"{prefix}_recipe")
                    for a in arms if ARMS[a][1] == "sft" and a != "recipe"]  # fmt: skip
    return out


def _over_seeds(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    """Per arm: each seed's gain over its own warm start on both worlds together, and the
    means over seeds with Student's t interval (own world, unseen world, both)."""
    lines = ["", "| seed | model | EM − its warm start's, own + unseen world (95% paired "
             "bootstrap) | won / lost | sign-test p |", "|---|---|---|---|---|"]  # fmt: skip
    per_arm: dict[str, dict[str, list[float]]] = {}
    for arm in arms:
        label, warm, _ = ARMS[arm]
        found = per_arm.setdefault(arm, {"both": [], "own": [], "unseen": []})
        for seed in seeds:
            d = root / f"seed{seed}"
            gain = both_worlds_gain(d, arm, warm, seed)
            own = paired_gain(d, f"eval_{arm}", f"eval_{warm}", seed)
            unseen = paired_gain(d, f"evalx_{arm}", f"evalx_{warm}", seed)
            if gain is None or own is None or unseen is None:
                continue
            found["both"].append(gain.diff)
            found["own"].append(own.diff)
            found["unseen"].append(unseen.diff)
            lines.append(f"| {seed} | {label} | {gain.diff:+.3f} [{gain.low:+.3f}, "
                         f"{gain.high:+.3f}] (n = {gain.n}) | {gain.wins} / {gain.losses} | "
                         f"{gain.p_value:.2g} |")  # fmt: skip
    lines += ["", "| model | seeds | mean gain, own + unseen [95% t over seeds] | own world "
              "| unseen world [95% t] |", "|---|---|---|---|---|"]  # fmt: skip
    for arm, found in per_arm.items():
        if not found["both"]:
            continue
        both, unseen = t_interval(found["both"], 0.95), t_interval(found["unseen"], 0.95)
        own = statistics.fmean(found["own"])
        lines.append(f"| {ARMS[arm][0]} | {both.n} | {both.mean:+.3f} [{both.low:+.3f}, "
                     f"{both.high:+.3f}] | {own:+.3f} | {unseen.mean:+.3f} [{unseen.low:+.3f}, "
                     f"{unseen.high:+.3f}] |")  # fmt: skip
    return lines


def references_worth(curve: Sequence[tuple[int, float]], em: float) -> float | None:
    """The number of SFT references whose warm start would score `em`, by linear interpolation
    on the measured (references, EM) points (None outside them: no extrapolation)."""
    points = sorted(curve)
    for (n0, e0), (n1, e1) in itertools.pairwise(points):
        if min(e0, e1) <= em <= max(e0, e1) and e0 != e1:
            return n0 + (em - e0) / (e1 - e0) * (n1 - n0)
    return None


def _pooled_em(folder: Path, name: str) -> float | None:
    """EM over the seed's own and the unseen world's held-out questions together."""
    rows = [*(_rows(folder / f"eval_{name}") or []), *(_rows(folder / f"evalx_{name}") or [])]
    if _summary(folder / f"eval_{name}") is None or _summary(folder / f"evalx_{name}") is None:
        return None
    return statistics.fmean(float(r["em"]) for r in rows) if rows else None


def _curve(
    root: Path, seeds: Sequence[int], curve: Sequence[int], sizes: tuple[int, int]
) -> list[str]:
    """What RL from the weak warm start is worth in references: EM (both worlds) of warm starts
    trained on more references, and where the weak start's RL policy lands among them."""
    weak, full = sizes
    names = [("sft_weak", weak), *((f"sft_{n}", n) for n in curve), ("sft", full)]
    lines = ["", "| seed | " + " | ".join(f"SFT on {n}" for _, n in names)
             + " | RL from the weak start | worth (references) |",
             "|---|" + "---|" * (len(names) + 2)]  # fmt: skip
    for seed in seeds:
        d = root / f"seed{seed}"
        points = [(n, _pooled_em(d, name)) for name, n in names]
        rl = _pooled_em(d, "weak")
        if rl is None or any(em is None for _, em in points):
            continue
        known = [(n, em) for n, em in points if em is not None]
        worth = references_worth(known, rl)
        cells = " | ".join(f"{em:.3f}" for _, em in known)
        shown = "–" if worth is None else f"{worth:.0f}"
        lines.append(f"| {seed} | {cells} | {rl:.3f} | {shown} |")
    return lines


def summarize(root: Path, seeds: Sequence[int], arms: Sequence[str], curve: Sequence[int] = (),
              sizes: tuple[int, int] = (50, 200)) -> str:  # fmt: skip
    """Markdown tables (per seed; mean ± std over seeds; paired gains; gains over both worlds
    with t intervals over seeds; the references curve; times) and a PNG."""
    models = _models(arms, curve)
    lines = ["| seed | model | EM [95% Wilson] | 1-hop | 2-hop | 3-hop | 4-hop "
             "| searches 1/2/3/4-hop | valid format | answered |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        d = root / f"seed{seed}"
        for label, name, _ in models:
            s, behaviour = _summary(d / name), _behaviour(d / name)
            if s is None or behaviour is None:
                continue
            # recomputed from the samples: evaluations run by older trees used other intervals
            em = proportion_ci([float(r["em"]) for r in _rows(d / name) or []], 0.95)
            hops = " | ".join("–" if (h := _em(s, k)) is None else f"{h:.3f}" for k in (1, 2, 3, 4))
            lines.append(f"| {seed} | {label} | {em.mean:.3f} [{em.low:.3f}, "
                         f"{em.high:.3f}] | {hops} | {behaviour[2]} | {behaviour[0]:.3f} | "
                         f"{behaviour[1]:.3f} |")  # fmt: skip
    lines += ["", "| model | EM, mean ± std over seeds | 1-hop | 2-hop | 3-hop | 4-hop |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for label, name, _ in models:
        picked = [_summary(root / f"seed{s}" / name) for s in seeds]
        cells = " | ".join(_mean_std([_em(p, h) for p in picked]) for h in (1, 2, 3, 4))
        lines.append(f"| {label} | {_mean_std([_em(p) for p in picked])} | {cells} |")
    lines += ["", "| seed | model | EM − its warm start's (95% paired bootstrap) | won / lost "
              "| sign-test p |", "|---|---|---|---|---|"]  # fmt: skip
    gains: dict[str, list[float]] = {}
    for seed in seeds:
        for label, name, base in _pairs(arms):
            gain = paired_gain(root / f"seed{seed}", name, base, seed)
            if gain is None:
                continue
            gains.setdefault(label, []).append(gain.diff)
            lines.append(f"| {seed} | {label} | {gain.diff:+.3f} [{gain.low:+.3f}, "
                         f"{gain.high:+.3f}] | {gain.wins} / {gain.losses} | "
                         f"{gain.p_value:.2g} |")  # fmt: skip
    for label, diffs in gains.items():
        lines.append(f"| mean | {label} | {statistics.fmean(diffs):+.3f} over {len(diffs)} "
                     "seed(s) | | |")  # fmt: skip
    lines += _over_seeds(root, seeds, arms)
    lines += signal_table(root, seeds, arms)
    lines += pass_table(root, seeds, arms)
    if "weak" in arms:
        lines += _curve(root, seeds, curve, sizes)
    lines += ["", "| seed | stage | wall minutes | CPU minutes |", "|---|---|---|---|"]
    for seed in seeds:
        times = read_times(root / f"seed{seed}" / "times.json")
        for stage in ("sft", "sft_weak", *(f"sft_{n}" for n in curve), *arms):
            if stage in times:
                cpu = times[stage]["cpu"]
                shown = "not recorded" if cpu is None else f"{cpu / 60:.1f}"
                lines.append(f"| {seed} | {stage} | {times[stage]['wall'] / 60:.1f} | {shown} |")
    _plot(root, seeds, arms)
    return write_summary(root, lines)


def _plot(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> None:
    """Per RL step, mean over seeds (band = ±1 std): train reward, searches, unanswered share."""
    plt = pyplot()
    panels = (("critic/score/mean", "train reward"),
              ("env/number_of_valid_search", "searches / trajectory"),
              ("signal/trained_total", "informative groups trained"),
              ("signal/moved", "‖θ − θ₀‖"))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for arm in arms:
        runs = []
        for seed in seeds:
            path = root / f"seed{seed}" / arm / "metrics.jsonl"
            if path.is_file():
                runs.append([json.loads(x) for x in path.read_text().splitlines() if x.strip()])
        for ax, (key, title) in zip(axes, panels, strict=True):
            ax.set_title(title)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
            series = [[r.get(key, 0.0) for r in run if r["step"] > 0] for run in runs]
            length = min((len(s) for s in series), default=0)
            if length == 0:
                continue
            per_step = [[s[i] for s in series] for i in range(length)]
            mean = [statistics.fmean(v) for v in per_step]
            std = [statistics.pstdev(v) for v in per_step]
            xs = list(range(1, length + 1))
            ax.plot(xs, mean, lw=2, label=f"{arm} ({len(series)} seeds)")
            ax.fill_between(xs, [m - s for m, s in zip(mean, std, strict=True)],
                            [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2)  # fmt: skip
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(root / "learning.png", dpi=110)
    plt.close(fig)
