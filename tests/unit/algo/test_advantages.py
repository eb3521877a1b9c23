"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import torch

from searchrl.algo.advantages import AdvantageInputs, gae, grpo_scores, make_estimator, rloo_scores


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
