"""Truncated importance sampling against the generation engine's behaviour log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from searchrl.algo.behaviour import behaviour_logprobs, truncated_importance_weights
from searchrl.types import Trajectory


def test_weights_are_the_capped_ratio_on_trained_tokens_and_one_elsewhere() -> None:
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    behaviour = torch.tensor([[-1.5, -0.5, float("nan"), -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weights, stats = truncated_importance_weights(old, behaviour, mask, cap=1.5)
    assert weights[0, 0] == pytest.approx(1.5)  # exp(0.5) = 1.65 → capped
    assert weights[0, 1] == pytest.approx(math.exp(-1.5))
    assert weights[0, 2] == 1.0  # behaviour unknown (e.g. a refiner segment)
    assert weights[0, 3] == 1.0  # not trained (env token or padding)
    assert stats["behaviour/logp_abs_diff_mean"] == pytest.approx((0.5 + 1.5) / 2)
    assert stats["behaviour/logp_abs_diff_max"] == pytest.approx(1.5)
    assert stats["behaviour/capped_share"] == pytest.approx(0.5)


def test_behaviour_logprobs_line_up_with_the_response_tokens() -> None:
    traj = Trajectory(id="a", question="q", golden_answers=[])
    traj.append("policy", "p", [5, 6], [-0.1, -0.2])
    traj.append("env", "e", [7, 8, 9])
    traj.append("policy", "p", [10], [-0.3])
    rows = behaviour_logprobs([traj], width=8)
    expected = [-0.1, -0.2, None, None, None, -0.3, None, None]
    for got, want in zip(rows[0].tolist(), expected, strict=True):
        assert math.isnan(got) if want is None else got == pytest.approx(want)


def test_appending_logprobs_of_the_wrong_length_is_refused() -> None:
    traj = Trajectory(id="a", question="q", golden_answers=[])
    with pytest.raises(ValueError, match="2 log-probs for 3 tokens"):
        traj.append("policy", "p", [1, 2, 3], [-0.1, -0.2])
