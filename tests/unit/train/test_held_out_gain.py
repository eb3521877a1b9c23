"""`held_out_gain`: the README's headline numbers (EM before and after RL, the paired gain, EM
per hop count) computed from two held-out evaluations of the same questions."""

from __future__ import annotations

import pytest

from searchrl.train.demo import held_out_gain


def test_held_out_gain_pairs_the_shared_questions() -> None:
    before = {"a": 0.0, "b": 1.0, "c": 0.0, "d": 1.0, "e": 0.0, "only_before": 1.0}
    after = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "e": 0.0, "only_after": 0.0}
    hops = {"a": 1, "b": 1, "c": 2, "d": 2}  # "e" has no hop count
    result = held_out_gain(before, after, hops, seed=0)
    assert result["n"] == 5  # questions in only one evaluation are left out
    assert result["em_before"]["mean"] == pytest.approx(2 / 5)
    assert result["em_after"]["mean"] == pytest.approx(3 / 5)
    gain = result["gain"]
    assert gain["diff"] == pytest.approx(1 / 5)
    assert (gain["wins"], gain["losses"], gain["ties"]) == (2, 1, 2)
    assert gain["low"] <= gain["diff"] <= gain["high"]
    assert gain["p_value"] == pytest.approx(1.0)  # 2 wins vs 1 loss: no evidence
    assert result["em_by_hops"] == {
        "1": {"n": 2, "before": 0.5, "after": 1.0},
        "2": {"n": 2, "before": 0.5, "after": 0.5},
        "None": {"n": 1, "before": 0.0, "after": 0.0},
    }


def test_held_out_gain_is_reproducible_and_sees_a_clear_gain() -> None:
    before = {f"q{i}": 0.0 for i in range(40)}
    after = {f"q{i}": 1.0 if i < 20 else 0.0 for i in range(40)}
    first = held_out_gain(before, after, {}, seed=3)
    assert first == held_out_gain(before, after, {}, seed=3)
    assert first["gain"]["diff"] == pytest.approx(0.5) and first["gain"]["low"] > 0.3
    assert first["gain"]["p_value"] < 1e-5  # 20 wins, 0 losses
