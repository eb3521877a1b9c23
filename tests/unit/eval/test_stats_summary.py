"""Bootstrap intervals, paired tests and the aggregates of `summary.json`."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from searchrl.eval.stats import (
    cluster_mean_ci,
    macro_mean_ci,
    macro_paired_test,
    macro_proportion_ci,
    mean_ci,
    paired_test,
    proportion_ci,
)
from searchrl.eval.summary import category, search_bucket, summarize


def test_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(1)
    small = mean_ci(rng.integers(0, 2, 40).tolist(), 2000, 0.95, seed=0)
    large = mean_ci(rng.integers(0, 2, 4000).tolist(), 2000, 0.95, seed=0)
    assert small.low < small.mean < small.high and large.low < large.mean < large.high
    assert large.high - large.low < (small.high - small.low) / 5
    # ~95% normal-approximation width for p=0.5, n=4000: 2 * 1.96 * sqrt(.25/4000) = 0.031
    assert abs((large.high - large.low) - 0.031) < 0.006


def test_cluster_interval_resamples_clusters_whole() -> None:
    # 50 questions, each with four identical rollouts: the data hold 50 independent values,
    # not 200. Resampling clusters gives the width of 50 values; resampling the 200 one by
    # one would give half of it.
    rng = np.random.default_rng(2)
    per_question = rng.integers(0, 2, 50).astype(float)
    values = np.repeat(per_question, 4).tolist()
    clusters = [f"q{i // 4}" for i in range(200)]
    whole = cluster_mean_ci(values, clusters, 4000, 0.95, seed=0)
    single = mean_ci(per_question.tolist(), 4000, 0.95, seed=0)
    naive = mean_ci(values, 4000, 0.95, seed=0)
    assert whole.mean == pytest.approx(single.mean) and whole.n == 200
    assert (whole.high - whole.low) == pytest.approx(single.high - single.low, rel=0.15)
    assert (whole.high - whole.low) > 1.6 * (naive.high - naive.low)
    # the mean is over values, not over cluster means: (1 + 1 + 0) / 3
    assert cluster_mean_ci([1.0, 1.0, 0.0], ["a", "a", "b"], 200, 0.95, 0).mean == 2 / 3
    # singleton clusters: exactly the plain bootstrap
    assert cluster_mean_ci(values[:40], [str(i) for i in range(40)], 500, 0.95, 3) == mean_ci(
        values[:40], 500, 0.95, 3
    )


def test_degenerate_samples_get_a_point_interval() -> None:
    assert mean_ci([1.0, 1.0, 1.0], 100, 0.95, 0).to_json() == {
        "mean": 1.0, "low": 1.0, "high": 1.0, "n": 3, "interval": "point"}  # fmt: skip
    assert mean_ci([0.5], 100, 0.95, 0).low == 0.5
    assert mean_ci([], 100, 0.95, 0).n == 0


def test_macro_mean_is_the_mean_of_set_means() -> None:
    estimate = macro_mean_ci([[1, 1, 1, 0], [0, 0]], 500, 0.95, 0)
    assert estimate.mean == pytest.approx((0.75 + 0.0) / 2)
    assert estimate.low <= estimate.mean <= estimate.high and estimate.n == 6


def test_paired_test_counts_and_exact_sign_test() -> None:
    a = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    b = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    result = paired_test(a, b, 1000, 0.95, 0)
    assert (result.wins, result.losses, result.ties) == (8, 0, 2)
    assert result.p_value == pytest.approx(2 / 2**8)  # two-sided binomial, 8 of 8
    assert result.diff == pytest.approx(0.8) and result.low > 0
    same = paired_test([1, 0, 1], [1, 0, 1], 100, 0.95, 0)
    assert same.p_value == 1.0 and same.ties == 3
    with pytest.raises(ValueError):
        paired_test([1], [1, 0], 100, 0.95, 0)


def row(set_name: str, em: float, searches: int, hops: int | None = None) -> dict:
    return {"id": f"{set_name}{em}{searches}{hops}", "set": set_name, "em": em, "f1": em,
            "subem": em, "searches": searches, "turns": searches + 1, "tokens": 10.0,
            "latency": 0.1, "hops": hops}  # fmt: skip


def test_categories_and_buckets() -> None:
    assert category(row("nq", 1, 0)) == "general"
    assert category(row("musique", 1, 0, 3)) == "multi-hop"
    assert category(row("world", 1, 0, 1)) == "general"
    assert category(row("world", 1, 0, 3)) == "multi-hop"
    assert category(row("mine", 1, 0)) == "unknown"
    assert [search_bucket(row("x", 0, n)) for n in (0, 3, 4, 9)] == ["0", "3", "4+", "4+"]


def test_summary_groups() -> None:
    rows = [row("hotpotqa", 1, 2), row("nq", 0, 1), row("nq", 1, 1),
            row("world", 1, 4, 2), row("world", 0, 12, 10)]  # fmt: skip
    summary = summarize(rows, 200, 0.95)
    assert list(summary["by_set"]) == ["nq", "hotpotqa", "world"]  # the papers' order first
    assert summary["overall"]["em"]["mean"] == pytest.approx(3 / 5)
    assert summary["average"]["em"]["mean"] == pytest.approx((0.5 + 1 + 0.5) / 3)
    assert summary["by_category"]["general"]["n"] == 2
    assert summary["by_category"]["multi-hop"]["n"] == 3
    assert list(summary["by_hops"]) == ["2", "10"]
    assert list(summary["by_searches"]) == ["1", "2", "4+"]
    assert summary["by_searches"]["4+"]["n"] == 2
    for block in summary["by_set"].values():
        for metric in ("em", "f1", "subem", "searches", "turns", "tokens", "latency"):
            assert {"mean", "low", "high", "n"} <= set(block[metric])


def test_bootstrap_works_with_the_scipy_111_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyproject allows scipy>=1.11, whose `bootstrap` names its generator `random_state`
    (`rng` arrived in 1.15): the call must fit either signature."""
    real = stats.bootstrap

    def bootstrap_1_11(data, statistic, *, n_resamples=9999, batch=None, vectorized=None,
                       paired=False, axis=0, confidence_level=0.95, alternative="two-sided",
                       method="BCa", bootstrap_result=None, random_state=None):  # fmt: skip
        return real(data, statistic, n_resamples=n_resamples, confidence_level=confidence_level,
                    method=method, rng=random_state)  # fmt: skip

    monkeypatch.setattr(stats, "bootstrap", bootstrap_1_11)
    single = mean_ci([0.1, 0.5, 0.9, 0.3], 200, 0.95, seed=0)
    macro = macro_mean_ci([[0.1, 0.5], [0.9, 0.3, 0.2]], 200, 0.95, seed=0)
    assert single.low < single.mean < single.high and macro.low < macro.mean < macro.high
    assert mean_ci([0.1, 0.5, 0.9, 0.3], 200, 0.95, seed=0) == single  # seeded: reproducible


def test_proportions_at_the_floor_get_a_wilson_interval_not_a_point() -> None:
    zero = proportion_ci([0.0] * 100, 0.95)
    expected = stats.binomtest(0, 100).proportion_ci(0.95, method="wilson")
    assert zero.mean == 0.0 and zero.low == 0.0 and zero.interval == "wilson"
    assert zero.high == pytest.approx(expected.high) and 0.03 < zero.high < 0.04
    some = proportion_ci([1.0] * 7 + [0.0] * 93, 0.95)
    expected = stats.binomtest(7, 100).proportion_ci(0.95, method="wilson")
    assert (some.low, some.high) == pytest.approx((expected.low, expected.high))
    full = proportion_ci([1.0] * 50, 0.95)
    assert full.high == 1.0 and full.low < 0.95
    summary = summarize([row("nq", 0, 1) for _ in range(100)], 200, 0.95)
    assert summary["by_set"]["nq"]["em"]["high"] > 0.03  # no "0.00 [0.00, 0.00]"
    assert summary["by_set"]["nq"]["f1"]["interval"] == "point"  # F1 stays a bootstrap mean


def test_macro_proportion_interval_uses_the_effective_sample_size() -> None:
    equal = macro_proportion_ci([[1.0] * 10 + [0.0] * 90, [1.0] * 30 + [0.0] * 70], 0.95)
    pooled = proportion_ci([1.0] * 40 + [0.0] * 160, 0.95)  # equal sizes: the pooled interval
    assert equal.mean == pytest.approx(0.2)
    assert (equal.low, equal.high) == pytest.approx((pooled.low, pooled.high))
    floor = macro_proportion_ci([[0.0] * 100, [0.0] * 84], 0.95)
    assert floor.mean == 0.0 and floor.high > 0.01
    # a small set weighs as much as a big one in the mean, so it widens the interval
    skewed = macro_proportion_ci([[1.0] * 20 + [0.0] * 80, [1.0] * 2 + [0.0] * 8], 0.95)
    assert skewed.high - skewed.low > equal.high - equal.low


def test_macro_paired_test_weighs_sets_equally_and_tests_the_average() -> None:
    big_a, big_b = [1.0] * 10 + [0.0] * 190, [0.0] * 200  # +0.05 on a big set
    small_a, small_b = [0.0] * 20, [1.0] * 10 + [0.0] * 10  # -0.5 on a small set
    result = macro_paired_test([(big_a, big_b), (small_a, small_b)], 2000, 0.95, seed=0)
    assert result.diff == pytest.approx((0.05 - 0.5) / 2)  # not the pooled (10 - 10) / 220
    assert (result.wins, result.losses, result.ties) == (10, 10, 200)
    assert result.high < 0 and result.p_value < 0.05
    same = macro_paired_test([([1, 0], [1, 0]), ([0, 0, 1], [0, 0, 1])], 500, 0.95, seed=0)
    assert same.p_value == 1.0 and same.diff == 0.0
    noise = macro_paired_test([([1, 0] * 20, [0, 1] * 20), ([1, 0], [0, 1])], 2000, 0.95, 0)
    assert noise.p_value > 0.5
