"""Uncertainty for evaluation numbers: percentile-bootstrap intervals on means (scipy), and
paired tests for two methods run on the same questions.

Neither paper reports an interval or a test (seed 000 "Missing Experiments" 7; seed 001
"Critical Assessment"): on Bamboogle's 125 questions one question is 0.8 EM points, so the
numbers below say which differences are distinguishable from resampling noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Estimate:
    """A mean with its bootstrap interval (`low == high == mean` when n < 2)."""

    mean: float
    low: float
    high: float
    n: int

    def to_json(self) -> dict[str, Any]:
        """Plain dict for summary files."""
        return asdict(self)


def _interval(result: Any, fallback: float) -> tuple[float, float]:
    low, high = result.confidence_interval
    if np.isnan(low) or np.isnan(high):  # scipy gives NaN on constant data for some methods
        return fallback, fallback
    return float(low), float(high)


def mean_ci(values: Sequence[float], resamples: int, confidence: float, seed: int) -> Estimate:
    """Mean of `values` with a percentile-bootstrap interval."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    mean = float(data.mean())
    if data.size < 2 or np.all(data == data[0]):
        return Estimate(mean, mean, mean, int(data.size))
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(mean, *_interval(result, mean), n=int(data.size))


def _mean_of_means(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([np.mean(s, axis=axis) for s in samples], axis=0)


def macro_mean_ci(
    groups: Sequence[Sequence[float]], resamples: int, confidence: float, seed: int
) -> Estimate:
    """The papers' "Avg." column (the unweighted mean of per-set means), with an interval
    from resampling within each set independently."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g) > 0]
    if not arrays:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    mean = float(_mean_of_means(*arrays))
    n = sum(a.size for a in arrays)
    if any(a.size < 2 for a in arrays) or all(np.all(a == a[0]) for a in arrays):
        return Estimate(mean, mean, mean, n)
    result = stats.bootstrap(
        tuple(arrays),
        _mean_of_means,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(mean, *_interval(result, mean), n=n)


@dataclass(frozen=True)
class PairedResult:
    """A vs B on the same questions: mean difference (A − B) with its paired-bootstrap
    interval, per-question wins/losses/ties, and the two-sided sign-test p-value over the
    questions where they differ (for 0/1 metrics this is the exact McNemar test)."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    wins: int
    losses: int
    ties: int
    p_value: float

    def to_json(self) -> dict[str, Any]:
        """Plain dict for summary files."""
        return asdict(self)


def paired_test(
    a: Sequence[float], b: Sequence[float], resamples: int, confidence: float, seed: int
) -> PairedResult:
    """Compare two methods' per-question scores (same questions, same order)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {x.size} vs {y.size}")
    delta = x - y
    wins, losses = int((delta > 0).sum()), int((delta < 0).sum())
    ties = int(delta.size - wins - losses)
    p_value = float(stats.binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0
    diff = mean_ci(delta, resamples, confidence, seed)
    return PairedResult(
        n=int(delta.size),
        mean_a=float(x.mean()) if x.size else float("nan"),
        mean_b=float(y.mean()) if y.size else float("nan"),
        diff=diff.mean,
        low=diff.low,
        high=diff.high,
        wins=wins,
        losses=losses,
        ties=ties,
        p_value=p_value,
    )
