"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from searchrl.algo.advantages import (
    AdvantageInputs,
    gae,
    grpo_scores,
    make_estimator,
    masked_whiten,
    rloo_scores,
)


def test_gae_with_unit_lambda_gamma_is_return_minus_value() -> None:
    values = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    mask = torch.ones(1, 4)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, 1.0 - values)
    torch.testing.assert_close(ret, torch.ones(1, 4))


def test_gae_skips_masked_positions() -> None:
    values = torch.tensor([[0.5, 9.0, 0.25]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    adv, _ = gae(rewards, values, mask, gamma=0.5, lam=0.5)
    # t=2: δ = 1 − 0.25 = 0.75. t=0 (next trained value is t=2's): δ = 0 + 0.5·0.25 − 0.5
    # = −0.375; A = −0.375 + 0.25·0.75 = −0.1875. The env position gets 0.
    torch.testing.assert_close(adv, torch.tensor([[-0.1875, 0.0, 0.75]]))


def test_grpo_z_scores_per_group() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    ids = ["a", "a", "a", "b", "b", "b"]
    out = grpo_scores(scores, ids, scale_by_std=True, eps=1e-6)
    mean, std = 1 / 3, torch.tensor([1.0, 0.0, 0.0]).std().item()
    expected = torch.tensor([(1 - mean) / std, -mean / std, -mean / std, 0.0, 0.0, 0.0])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_grpo_interleaved_groups_and_no_std() -> None:
    scores = torch.tensor([2.0, 1.0, 0.0, 3.0])
    out = grpo_scores(scores, ["x", "y", "x", "y"], scale_by_std=False, eps=1e-6)
    torch.testing.assert_close(out, torch.tensor([1.0, -1.0, -1.0, 1.0]))


def test_grpo_group_of_one_is_reinforce() -> None:
    scores = torch.tensor([0.7, 0.0])
    out = grpo_scores(scores, ["a", "b"], scale_by_std=True, eps=0.0)
    torch.testing.assert_close(out, scores)


def test_rloo_leave_one_out() -> None:
    scores = torch.tensor([1.0, 0.0, 0.5])
    out = rloo_scores(scores, ["g", "g", "g"])
    torch.testing.assert_close(out, torch.tensor([1 - 0.25, 0 - 0.75, 0.5 - 0.5]))


def test_estimators_broadcast_over_trained_tokens() -> None:
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    inp = AdvantageInputs(
        scores=torch.tensor([1.0, 0.0]),
        token_rewards=torch.zeros(2, 3),
        mask=mask,
        group_ids=["q", "q"],
    )
    estimator = make_estimator("grpo", gamma=1.0, lam=1.0, scale_by_std=False, eps=0.0)
    adv, _ = estimator(inp)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.0, 0.5], [-0.5, -0.5, 0.0]]))
    reinforce, _ = make_estimator("reinforce", gamma=1, lam=1, scale_by_std=True, eps=0)(inp)
    torch.testing.assert_close(reinforce, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize(("size", "value"), [(6, 0.9), (7, 0.2), (8, 0.1), (3, 0.45), (5, 0.3)])
def test_equal_non_binary_rewards_give_exactly_zero(size: int, value: float) -> None:
    """float32 statistics left a residue that the std division turned into nonzero advantages
    (0.06 for six rewards of 0.9)."""
    scores = torch.full((size,), value, dtype=torch.float32)
    ids = ["g"] * size
    assert torch.equal(grpo_scores(scores, ids, scale_by_std=True, eps=1e-6), torch.zeros(size))
    assert torch.equal(rloo_scores(scores, ids), torch.zeros(size))


def test_gae_advantages_are_whitened_over_trained_tokens_returns_are_not() -> None:
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    inp = AdvantageInputs(
        scores=torch.tensor([1.0, 0.0]),
        token_rewards=torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]),
        mask=mask,
        group_ids=["a", "b"],
        values=torch.tensor([[0.1, 0.5, 0.2, 0.3], [0.4, 0.1, 0.0, 0.0]]),
    )
    raw_adv, raw_ret = make_estimator(
        "gae", gamma=1, lam=1, scale_by_std=True, eps=0, whiten=False
    )(inp)
    adv, ret = make_estimator("gae", gamma=1, lam=1, scale_by_std=True, eps=0)(inp)
    torch.testing.assert_close(ret, raw_ret)
    trained = adv[mask.bool()]
    torch.testing.assert_close(trained.mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(trained.std(), torch.tensor(1.0), atol=1e-4, rtol=0)
    assert torch.equal(adv[~mask.bool()], torch.zeros(3))
    torch.testing.assert_close(masked_whiten(raw_adv, mask), adv)
