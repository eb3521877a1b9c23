"""Uncertainty for evaluation numbers: Wilson score intervals for proportions (EM, SubEM),
percentile-bootstrap intervals for other means (F1, searches, tokens, latency), and paired tests
for two methods run on the same questions, per set and on the papers' "Avg." over sets.

Neither paper reports an interval or a test (seed 000 "Missing Experiments" 7; seed 001
"Critical Assessment"): on Bamboogle's 84 shared questions one question is 1.2 EM points, so the
numbers below say which differences are distinguishable from sampling noise.

Why Wilson for proportions: a percentile bootstrap resamples the observed answers, so a method
that got 0 of 100 right gets the interval [0, 0], as if 0 were known exactly; the Wilson score
interval (Wilson 1927) inverts the binomial score test and gives [0.000, 0.037] there, with
close to nominal coverage down to n of a few dozen. It is what `scipy.stats.binomtest(...)
.proportion_ci(method="wilson")` computes; the formula is written out here because the papers'
"Avg." needs it at a non-integer effective sample size (`macro_proportion_ci`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Estimate:
    """A mean with its interval (`low == high == mean` when the data cannot say more)."""

    mean: float
    low: float
    high: float
    n: int
    interval: str = "bootstrap"
    """How the interval was computed: `wilson`, `bootstrap`, `t` (Student's, over replicates)
    or `point` (n < 2 or constant non-proportion data)."""

    def to_json(self) -> dict[str, Any]:
        """Plain dict for summary files."""
        return asdict(self)


def _nan(n: int = 0) -> Estimate:
    return Estimate(float("nan"), float("nan"), float("nan"), n, "point")


def seeded(seed: int) -> dict[str, Any]:
    """The seeding keyword of `scipy.stats.bootstrap`: SciPy 1.15 renamed `random_state` to
    `rng`; both accept a NumPy Generator, so `scipy>=1.11` (pyproject) works either way."""
    parameters = inspect.signature(stats.bootstrap).parameters
    key = "rng" if "rng" in parameters else "random_state"
    return {key: np.random.default_rng(seed)}


def _interval(result: Any, fallback: float) -> tuple[float, float]:
    low, high = result.confidence_interval
    if np.isnan(low) or np.isnan(high):  # scipy gives NaN on constant data for some methods
        return fallback, fallback
    return float(low), float(high)


def mean_ci(values: Sequence[float], resamples: int, confidence: float, seed: int) -> Estimate:
    """Mean of `values` with a percentile-bootstrap interval."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return _nan()
    mean = float(data.mean())
    if data.size < 2 or np.all(data == data[0]):
        return Estimate(mean, mean, mean, int(data.size), "point")
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        **seeded(seed),
    )
    return Estimate(mean, *_interval(result, mean), n=int(data.size))


def cluster_mean_ci(
    values: Sequence[float], clusters: Sequence[str], resamples: int, confidence: float, seed: int
) -> Estimate:
    """Mean of `values` with a percentile-bootstrap interval that resamples `clusters` (e.g.
    several rollouts of one question) whole: values of one cluster are not independent, and
    resampling them one by one gives too narrow an interval. The mean stays the mean over
    values (each resample's too: its values' sum over their count). With every cluster a
    single value this is `mean_ci`."""
    if len(set(clusters)) == len(clusters):
        return mean_ci(values, resamples, confidence, seed)
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    keys = sorted(set(clusters))
    index = {key: i for i, key in enumerate(keys)}
    sums, counts = np.zeros(len(keys)), np.zeros(len(keys))
    np.add.at(sums, [index[c] for c in clusters], data)
    np.add.at(counts, [index[c] for c in clusters], 1.0)
    drawn = np.random.default_rng(seed).integers(0, len(keys), (resamples, len(keys)))
    means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(mean, float(low), float(high), n=int(data.size))


def t_interval(values: Sequence[float], confidence: float) -> Estimate:
    """Mean of a few independent replicates (e.g. one gain per training seed) with Student's t
    interval, mean ± t(n − 1) · sd / √n: the question it answers is whether another seed's
    run would land on the same side of 0, which a bootstrap over 3-5 values cannot say."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return _nan()
    mean = float(data.mean())
    if data.size < 2:
        return Estimate(mean, mean, mean, int(data.size), "point")
    half = float(stats.t.ppf(0.5 + confidence / 2, data.size - 1) * stats.sem(data))
    return Estimate(mean, mean - half, mean + half, int(data.size), "t")


def wilson(p: float, n: float, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a proportion `p` observed on `n` trials (`n` may be an
    effective, non-integer sample size)."""
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if p <= 0 else max(0.0, float(center - half))  # exact 0 and 1 at the bounds
    high = 1.0 if p >= 1 else min(1.0, float(center + half))
    return low, high


def proportion_ci(values: Sequence[float], confidence: float) -> Estimate:
    """Share of 1s in 0/1 `values` with its Wilson interval."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return _nan()
    mean = float(data.mean())
    return Estimate(mean, *wilson(mean, data.size, confidence), n=int(data.size), interval="wilson")


def _mean_of_means(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([np.mean(s, axis=axis) for s in samples], axis=0)


def macro_mean_ci(
    groups: Sequence[Sequence[float]], resamples: int, confidence: float, seed: int
) -> Estimate:
    """The papers' "Avg." column (the unweighted mean of per-set means), with an interval
    from resampling within each set independently."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g) > 0]
    if not arrays:
        return _nan()
    mean = float(_mean_of_means(*arrays))
    n = sum(a.size for a in arrays)
    if any(a.size < 2 for a in arrays) or all(np.all(a == a[0]) for a in arrays):
        return Estimate(mean, mean, mean, n, "point")
    result = stats.bootstrap(
        tuple(arrays),
        _mean_of_means,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        **seeded(seed),
    )
    return Estimate(mean, *_interval(result, mean), n=n)


def macro_proportion_ci(groups: Sequence[Sequence[float]], confidence: float) -> Estimate:
    """ "Avg." of per-set proportions with a Wilson interval at the effective sample size
    n_eff = K² / Σ 1/n_k: the n at which one proportion p̄ has the variance p̄(1-p̄)/n_eff that
    the mean of K proportions all equal to p̄ would have. With equal set sizes it is the pooled
    Wilson interval; when the sets' proportions differ it is slightly conservative (wider)."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g) > 0]
    if not arrays:
        return _nan()
    mean = float(_mean_of_means(*arrays))
    n_eff = len(arrays) ** 2 / sum(1.0 / a.size for a in arrays)
    n = sum(a.size for a in arrays)
    return Estimate(mean, *wilson(mean, n_eff, confidence), n=n, interval="wilson")


@dataclass(frozen=True)
class PairedResult:
    """A vs B on the same questions: mean difference (A − B) with its paired-bootstrap
    interval, per-question wins/losses/ties, and a two-sided p-value: the sign test over the
    questions where they differ (for 0/1 metrics the exact McNemar test), or for the "Avg."
    over sets a sign-flip randomization test stratified by set."""

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


def _counts(delta: np.ndarray) -> tuple[int, int, int]:
    wins, losses = int((delta > 0).sum()), int((delta < 0).sum())
    return wins, losses, int(delta.size - wins - losses)


def paired_test(
    a: Sequence[float], b: Sequence[float], resamples: int, confidence: float, seed: int
) -> PairedResult:
    """Compare two methods' per-question scores (same questions, same order)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {x.size} vs {y.size}")
    delta = x - y
    wins, losses, ties = _counts(delta)
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


def sign_flip_p_value(deltas: Sequence[np.ndarray], resamples: int, seed: int) -> float:
    """Two-sided p-value of "A and B are exchangeable within every pair" for the unweighted
    mean over sets of per-set mean differences: each pair's difference keeps or flips its
    sign at random (a paired randomization test, stratified by set)."""
    live = [d for d in deltas if d.size and np.any(d != 0)]
    if not live:
        return 1.0
    observed = abs(float(np.mean([d.mean() for d in deltas if d.size])))
    rng = np.random.default_rng(seed)
    total = np.zeros(resamples)
    for d in deltas:
        if d.size:
            signs = rng.choice((-1.0, 1.0), size=(resamples, d.size))
            total += (signs * d).mean(axis=1)
    flipped = np.abs(total / sum(1 for d in deltas if d.size))
    extreme = int(np.sum(flipped >= observed - 1e-12))
    return (1 + extreme) / (1 + resamples)


def macro_paired_test(
    pairs_by_set: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int,
    confidence: float,
    seed: int,
) -> PairedResult:
    """A vs B on the papers' "Avg.": the difference of the unweighted means over sets, its
    interval from resampling pairs within each set, and the stratified sign-flip test."""
    xs = [np.asarray(a, dtype=float) for a, _ in pairs_by_set]
    ys = [np.asarray(b, dtype=float) for _, b in pairs_by_set]
    if any(x.shape != y.shape for x, y in zip(xs, ys, strict=True)):
        raise ValueError("paired samples differ in length within a set")
    deltas = [x - y for x, y in zip(xs, ys, strict=True)]
    diff = macro_mean_ci([d.tolist() for d in deltas], resamples, confidence, seed)
    wins, losses, ties = _counts(np.concatenate(deltas) if deltas else np.array([]))
    return PairedResult(
        n=wins + losses + ties,
        mean_a=float(np.mean([x.mean() for x in xs if x.size])) if xs else float("nan"),
        mean_b=float(np.mean([y.mean() for y in ys if y.size])) if ys else float("nan"),
        diff=diff.mean,
        low=diff.low,
        high=diff.high,
        wins=wins,
        losses=losses,
        ties=ties,
        p_value=sign_flip_p_value(deltas, resamples, seed),
    )
