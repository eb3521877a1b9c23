"""`benchmarks/search_r2/trim_skill.py` weighs every cut's regenerated reward by each cut policy:
the trimmer's, its argmax, the batch-average cut (S_trim's baseline), the uniform cut (the
random-cut arm), the first step and the oracle's flaw step."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from searchrl.refiner.meta import Reading
from trim_skill import table


def _reading(probs: list[float]) -> Reading:
    """A reading with P(answer k) = probs[k], k = 0..T."""
    return Reading("", [], [[k] for k in range(len(probs))], [math.log(p) for p in probs])


def _cells(lines: list[str]) -> dict[str, list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return {row[0]: row[1:] for row in rows}


def test_each_policy_is_the_expected_reward_of_its_cut_distribution() -> None:
    # π_h = (0.8, 0.2) and (0.2, 0.8); the batch-average cut is (0.5, 0.5). The first
    # transcript only comes right when cut at step 1, the second at step 2: a trimmer that
    # leans the right way each time earns 0.8 where cutting where it cuts on average earns 0.5
    # (S_trim = Σ_k Cov(π_h(k), G_k) = +0.3), and a constant cut at step 1 earns 0.5.
    readings = [_reading([0.5, 0.4, 0.1]), _reading([0.5, 0.1, 0.4]), _reading([0.9, 0.05, 0.05])]
    labels = [1, 2, 0]
    gains = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    cells = _cells(table(readings, labels, gains))
    assert cells["trimmer (drawn)"][:3] == ["3", f"{1.6 / 3:.3f}", "+0.200 (+0.000, +0.300)"]
    assert cells["trimmer (drawn)"][3].startswith("+0.200")  # uniform = batch-average here
    assert cells["trimmer (argmax)"][1] == f"{2 / 3:.3f}"
    assert cells["batch-average"][1:3] == [f"{1 / 3:.3f}", "+0.000 (+0.000, +0.000)"]
    assert cells["uniform"][1] == f"{1 / 3:.3f}"
    assert cells["first step"][1] == f"{1 / 3:.3f}"
    # the oracle cuts the flawed ones only, both where they come right
    assert cells["oracle"][:2] == ["2", "1.000"]
    assert cells["oracle"][2].startswith("+0.500")


def test_the_batch_average_is_taken_over_the_set_and_cut_to_each_length() -> None:
    # T = 3 cutting at step 3, T = 1 at step 1: π̄ = (0.5, 0, 0.5) over the set, each
    # transcript's share of it restricted to its own 1..T and renormalised
    readings = [_reading([0.5, 1e-9, 1e-9, 0.5]), _reading([0.5, 0.5])]
    gains = [[0.0, 0.0, 1.0], [1.0]]
    cells = _cells(table(readings, [3, 1], gains))
    # the first transcript's average cut earns 0.5, the second's 1.0
    assert cells["batch-average"][1] == "0.750"
    assert cells["trimmer (drawn)"][1] == "1.000"
    assert cells["uniform"][1] == f"{(1 / 3 + 1.0) / 2:.3f}"


def test_restarting_is_a_column_and_rollouts_of_one_question_resample_together() -> None:
    # q1's four draws come right only when cut at step 2, q2's only from a new rollout
    readings = [_reading([0.2, 0.1, 0.7])] * 8
    gains = [[0.0, 1.0]] * 4 + [[1.0, 0.0]] * 4
    labels = [2] * 4 + [1] * 4
    plain = _cells(table(readings, labels, gains))
    clustered = _cells(table(readings, labels, gains, ["q1"] * 4 + ["q2"] * 4))
    # π_h = (0.125, 0.875): the trimmer earns 0.875 on q1 and 0.125 on q2 against a new
    # rollout's 0 and 1, so +0.875 and −0.875
    assert plain["first step"][4] == "+0.000 (+0.000, +0.000)"
    # two questions resampled whole draw q1q1, q1q2 or q2q2: the interval spans ±0.875;
    # eight draws resampled one by one would take them as eight independent transcripts
    assert clustered["trimmer (drawn)"][4] == "+0.000 (-0.875, +0.875)"
    low, high = (float(x) for x in plain["trimmer (drawn)"][4][8:-1].split(", "))
    assert -0.75 < low < 0 < high < 0.75


def test_flaws_are_split_by_kind_with_each_cut_s_expected_reward() -> None:
    from trim_skill import kind_table

    # T = 2: label 2 a wrong answer after a sound search, label 1 a search that missed
    readings = [_reading([0.5, 0.25, 0.25]), _reading([0.5, 0.25, 0.25]), _reading([0.9, 0.1])]
    gains = [[1.0, 0.0], [0.0, 1.0], [0.0]]
    rows = _cells(kind_table(readings, [2, 1, 0], gains))
    # answer-step flaw: the oracle cut (step 2) earns 0, a new rollout 1, uniform and the
    # even trimmer 0.5; the search-step flaw the other way round; the clean one is left out
    assert rows["at the answer step"] == ["1", "0.000", "1.000", "0.500", "0.500"]
    assert rows["at a search step"] == ["1", "0.000", "0.000", "0.500", "0.500"]


def test_repeats_are_counted_per_cut_and_kind_with_the_em_of_each_side() -> None:
    from trim_skill import repeat_table

    rows = [
        ("first step", "search step", False, 1.0),
        ("oracle's step", "answer step", True, 0.0),
        ("oracle's step", "answer step", True, 0.0),
        ("oracle's step", "answer step", False, 1.0),
        ("first step", "search step", True, 0.0),
    ]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in repeat_table(rows)[2:]]
    # the oracle's cut comes first whatever the order of the rows; a kind with no rows is left out
    assert cells == [
        ["oracle's step", "answer step", "3", "0.667", "0.000", "1.000"],
        ["first step", "search step", "2", "0.500", "0.000", "1.000"],
    ]


def test_cuts_before_and_after_the_oracle_s_step_against_a_new_rollout() -> None:
    from trim_skill import offset_table

    # Flawed at step 3 of 3 and at step 2 of 2; the clean transcript (label 0) is left out.
    labels = [3, 2, 0]
    gains = [[0.5, 1.0, 0.0], [0.25, 0.0], [1.0, 1.0]]
    rows = _cells(offset_table(labels, gains, ["a", "b", "c"], range(-2, 2)))
    assert set(rows) == {"oracle's step -2", "oracle's step -1", "oracle's step"}  # no step 4
    assert rows["oracle's step -2"][:3] == ["1", "0.500", "0.500"]  # k = 1 is the first step
    assert rows["oracle's step -2"][3].startswith("+0.000")
    assert rows["oracle's step -1"][:3] == ["2", "0.625", "0.375"]  # k = 2 and k = 1
    assert rows["oracle's step -1"][3].startswith("+0.250")
    assert rows["oracle's step"][:3] == ["2", "0.000", "0.375"]
    assert rows["oracle's step"][3].startswith("-0.375")


def test_a_checked_trimmer_is_weighed_against_its_own_batch_average_cut() -> None:
    # π_h is even on both; a check fires on the first at step 2, where it comes right. The
    # checked trimmer earns 1 there and π_h's 0.5 on the second; its batch-average cut is
    # (0.25, 0.75), which earns 0.75 and 0.25: S_trim = +0.25, where π_h alone has none.
    even = [0.5, 0.25, 0.25]
    gains = [[0.0, 1.0], [1.0, 0.0]]
    plain = _cells(table([_reading(even), _reading(even)], [2, 1], gains))
    checked = replace(_reading(even), checked=2)
    cells = _cells(table([checked, _reading(even)], [2, 1], gains))
    assert plain["trimmer (drawn)"][1:3] == ["0.500", "+0.000 (+0.000, +0.000)"]
    assert cells["trimmer (drawn)"][1] == "0.750"
    assert cells["batch-average"][1] == "0.500"
    assert cells["trimmer (drawn)"][2].startswith("+0.250")
    assert cells["uniform"][1] == "0.500"
