"""The signal tables of `benchmarks/training/learning.py --summarize`: what each arm's RL was
given to learn from (informative groups trained, per hour and per CPU-hour, how far it moved,
its probe's pass@k and KL over the run), pass@k at temperature 1 on the test questions, and the
overfit check. Read-only over the run folder."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from learning_arms import ARMS


def _metrics(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _probes(rows: Sequence[dict]) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in rows if "probe/pass@1" in r]


def signal_row(rows: Sequence[dict]) -> dict[str, float] | None:  # type: ignore[type-arg]
    """The budget of one run from its `metrics.jsonl` rows (None before its first step)."""
    steps = [r for r in rows if r.get("step", 0) > 0 and "signal/trained_total" in r]
    if not steps:
        return None
    last, probes = steps[-1], _probes(rows)
    first_probe, last_probe = (probes[0], probes[-1]) if probes else ({}, {})
    screen = next((r for r in rows if "screen/kept_share" in r), {})
    return {
        "steps": float(last["step"]),
        "trained": last["signal/trained_total"],
        "sampled": last["signal/sampled_total"],
        "per_hour": last["signal/informative_per_hour"],
        "per_cpu_hour": last.get("signal/informative_per_cpu_hour", float("nan")),
        "moved": last.get("signal/moved", float("nan")),
        "moved_rel": last.get("signal/moved_rel", float("nan")),
        "kl": last_probe.get("signal/probe_kl", float("nan")),
        "pass1": (first_probe.get("probe/pass@1", float("nan")),
                  last_probe.get("probe/pass@1", float("nan"))),
        "passk": (first_probe.get("probe/pass@k", float("nan")),
                  last_probe.get("probe/pass@k", float("nan"))),
        "kept": screen.get("screen/kept_share", float("nan")),
        "minutes": sum(r.get("timing_s/step", 0.0) for r in steps) / 60,
    }  # fmt: skip


def signal_table(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    """One row per arm and seed: the signal each RL run received."""
    lines = [
        "",
        "| seed | arm | steps | informative groups trained / sampled | per hour | per "
        "CPU-hour | ‖θ − θ₀‖ (relative) | probe KL | probe pass@1 | probe pass@4 | "
        "screen kept | RL minutes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for seed in seeds:  # fmt: skip
        for arm in [*arms, "overfit"]:
            row = signal_row(_metrics(root / f"seed{seed}" / arm / "metrics.jsonl"))
            if row is None:
                continue
            label = ARMS[arm][0] if arm in ARMS else "overfit check (32 fixed questions)"
            lines.append(
                f"| {seed} | {label} | {row['steps']:.0f} | {row['trained']:.0f} / "
                f"{row['sampled']:.0f} | {row['per_hour']:.0f} | {row['per_cpu_hour']:.0f} | "
                f"{row['moved']:.3g} ({row['moved_rel']:.2e}) | {row['kl']:.4f} | "
                f"{row['pass1'][0]:.3f} → {row['pass1'][1]:.3f} | {row['passk'][0]:.3f} → "
                f"{row['passk'][1]:.3f} | {row['kept']:.2f} | {row['minutes']:.0f} |"
            )
    return lines


def pass_at_k(path: Path) -> tuple[float, float, int] | None:
    """(pass@1, pass@k, questions) of a file of sampled trajectories, k samples a question."""
    if not path.is_file():
        return None
    by_question: dict[str, list[bool]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            uid = row.get("uid") or row["id"].rsplit("#", 1)[0]
            by_question.setdefault(uid, []).append(row["metrics"].get("em", 0.0) > 0)
    if not by_question:
        return None
    samples = [s for v in by_question.values() for s in v]
    return (statistics.fmean(samples), statistics.fmean(any(v) for v in by_question.values()),
            len(by_question))  # fmt: skip


def pass_table(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[str]:
    """pass@1 and pass@4 at temperature 1 on each seed's test questions, and the overfit
    check's fixed questions before and after (8 samples each)."""
    lines = ["", "| seed | model | test questions | pass@1 (T = 1) | pass@4 | pass@4 − warm "
             "start's |", "|---|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        d = root / f"seed{seed}"
        warm = pass_at_k(d / "pass_sft.jsonl")
        for name in ["sft", *arms]:
            found = pass_at_k(d / f"pass_{name}.jsonl")
            if found is None:
                continue
            label = "SFT warm start" if name == "sft" else ARMS[name][0]
            gain = "–" if warm is None or name == "sft" else f"{found[1] - warm[1]:+.3f}"
            lines.append(f"| {seed} | {label} | {found[2]} | {found[0]:.3f} | {found[1]:.3f} | "
                         f"{gain} |")  # fmt: skip
        before, after = pass_at_k(d / "fixed_sft.jsonl"), pass_at_k(d / "fixed_overfit.jsonl")
        if before is not None and after is not None:
            lines.append(f"| {seed} | overfit check: its {after[2]} fixed questions, before → "
                         f"after | | {before[0]:.3f} → {after[0]:.3f} | {before[1]:.3f} → "
                         f"{after[1]:.3f} (pass@8) | |")  # fmt: skip
    return lines
