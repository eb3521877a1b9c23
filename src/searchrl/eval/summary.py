"""Aggregates of an evaluation's per-sample rows, each mean with an interval (Wilson for the 0/1
metrics EM and SubEM, percentile bootstrap for the others; `eval.stats` says why): per set,
overall, the papers' "Avg." (mean over sets), general vs multi-hop, by hop count and by the
number of searches a trajectory made (seed 000 "Missing Experiments" 1: does search behaviour
follow difficulty?)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from searchrl.data.benchmarks import BENCHMARKS
from searchrl.eval.stats import (
    Estimate,
    macro_mean_ci,
    macro_proportion_ci,
    mean_ci,
    paired_test,
    proportion_ci,
)

METRICS = ("em", "f1", "subem", "searches", "turns", "tokens", "latency")
"""Per-sample numbers every aggregate reports."""

PROPORTIONS = frozenset({"em", "subem"})
"""Metrics that are 0 or 1 per question: their intervals are Wilson score intervals."""

_CATEGORY = {b.name: b.category for b in BENCHMARKS}

Row = dict[str, Any]


def category(row: Row) -> str:
    """`general` or `multi-hop`: the papers' grouping for the seven sets; other sets (the
    synthetic world) by hop count (1 hop = general); `unknown` without either."""
    if row["set"] in _CATEGORY:
        return _CATEGORY[row["set"]]
    hops = row.get("hops")
    if hops is None:
        return "unknown"
    return "general" if hops <= 1 else "multi-hop"


def search_bucket(row: Row) -> str:
    """0, 1, 2, 3 or 4+ searches."""
    n = int(row.get("searches", 0))
    return str(n) if n < 4 else "4+"


class Aggregator:
    """Means with intervals at a fixed resampling budget and seed (same rows, same numbers)."""

    def __init__(self, resamples: int, confidence: float, seed: int = 0):
        self.resamples = resamples
        self.confidence = confidence
        self.seed = seed

    def block(self, rows: Sequence[Row]) -> dict[str, Any]:
        """Every metric's mean and interval over `rows`."""
        out: dict[str, Any] = {"n": len(rows)}
        for metric in METRICS:
            values = [float(r.get(metric) or 0.0) for r in rows]
            out[metric] = self.estimate(metric, values).to_json()
        return out

    def estimate(self, metric: str, values: Sequence[float]) -> Estimate:
        """Mean and interval of one metric's per-question values."""
        if metric in PROPORTIONS:
            return proportion_ci(values, self.confidence)
        return mean_ci(values, self.resamples, self.confidence, self.seed)

    def grouped(self, rows: Sequence[Row], key: Callable[[Row], Any]) -> dict[str, Any]:
        """`block` per group, groups in sorted order (None-valued keys left out)."""
        groups: dict[str, list[Row]] = defaultdict(list)
        for row in rows:
            value = key(row)
            if value is not None:
                groups[str(value)].append(row)
        return {name: self.block(groups[name]) for name in sorted(groups, key=_natural)}

    def macro(self, rows: Sequence[Row]) -> dict[str, Any]:
        """The unweighted mean over sets of each metric's per-set mean."""
        by_set: dict[str, list[Row]] = defaultdict(list)
        for row in rows:
            by_set[row["set"]].append(row)
        out: dict[str, Any] = {"sets": len(by_set)}
        for metric in METRICS:
            groups = [[float(r.get(metric) or 0.0) for r in g] for g in by_set.values()]
            if metric in PROPORTIONS:
                estimate = macro_proportion_ci(groups, self.confidence)
            else:
                estimate = macro_mean_ci(groups, self.resamples, self.confidence, self.seed)
            out[metric] = estimate.to_json()
        return out


def _natural(name: str) -> tuple[int, str]:
    """Numbers in numeric order ("2" before "10", "4+" after "3"), then names."""
    digits = name.rstrip("+")
    return (int(digits), name) if digits.isdigit() else (10**9, name)


def summarize(
    rows: Sequence[Row], resamples: int, confidence: float, seed: int = 0
) -> dict[str, Any]:
    """The summary written to `summary.json`."""
    agg = Aggregator(resamples, confidence, seed)
    sets = sorted({r["set"] for r in rows}, key=set_order)
    by_set = agg.grouped(rows, lambda r: r["set"])
    out = {
        "n": len(rows),
        "confidence": confidence,
        "overall": agg.block(rows),
        "average": agg.macro(rows),
        "by_set": {s: by_set[s] for s in sets},
        "by_category": agg.grouped(rows, category),
        "by_hops": agg.grouped(rows, lambda r: r.get("hops")),
        "by_searches": agg.grouped(rows, search_bucket),
    }
    if rows and all("actor_em" in r for r in rows):
        out["actor"] = refiner_off(rows, agg)
    return out


def refiner_off(rows: Sequence[Row], agg: Aggregator) -> dict[str, Any]:
    """Search-R2 rows: the trained Actor's own greedy answers, before the Meta-Refiner (the
    number the paper reports: it validates the Actor without the refiner), and the paired
    gain of test-time refinement over them."""
    out: dict[str, Any] = {"n": len(rows)}
    for metric in ("em", "f1", "subem"):
        values = [float(r[f"actor_{metric}"]) for r in rows]
        out[metric] = mean_ci(values, agg.resamples, agg.confidence, agg.seed).to_json()
    out["revised"] = sum(bool(r.get("revised")) for r in rows) / len(rows)
    refined = [float(r["em"]) for r in rows]
    actor = [float(r["actor_em"]) for r in rows]
    gain = paired_test(refined, actor, agg.resamples, agg.confidence, agg.seed)
    out["refinement_gain_em"] = gain.to_json()
    return out


def set_order(name: str) -> tuple[int, str]:
    """The papers' column order for the seven sets, others after them by name."""
    order = [b.name for b in BENCHMARKS]
    return (order.index(name), name) if name in order else (len(order), name)
