"""Losses against hand-computed values, and masking gives exactly zero gradient."""

from __future__ import annotations

import math

import pytest
import torch

from searchrl.algo.losses import (
    aggregate,
    entropy_from_logits,
    kl_k1,
    kl_k3,
    kl_penalized_rewards,
    make_loss_weights,
    ppo_clip,
    seq_mean_token_mean_weights,
    token_mean_weights,
    training_mask,
    value_loss,
)


def test_ppo_clip_hand_values() -> None:
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.5]]))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = ppo_clip(logp, old, adv, clip_eps=0.2)
    # ratio 1.5, A>0 → min(1.5, 1.2) = 1.2; ratio 0.5, A>0 → 0.5 (unclipped is smaller);
    # ratio 1.1, A<0 → −1.1 (inside the clip); ratio 0.5, A<0 → min(−0.5, −0.8) = −0.8.
    torch.testing.assert_close(loss, torch.tensor([[-1.2, -0.5, 1.1, 0.8]]))
    torch.testing.assert_close(clipped, torch.tensor([[1.0, 0.0, 0.0, 1.0]]))


def test_value_loss_clipping() -> None:
    values = torch.tensor([[2.0, 0.1]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    loss, clipped = value_loss(values, old, returns, clip=0.5)
    # v=2 → clipped to 0.5: max((2−1)², (0.5−1)²)/2 = 0.5; v=0.1: both (0.9)²/2.
    torch.testing.assert_close(loss, torch.tensor([[0.5, 0.405]]))
    torch.testing.assert_close(clipped, torch.tensor([[0.0, 0.0]]))


def test_kl_estimators() -> None:
    logp = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    torch.testing.assert_close(kl_k1(logp, ref), torch.tensor([math.log(2.0)]))
    # r = 0.25/0.5 = 0.5 → 0.5 − log 0.5 − 1
    torch.testing.assert_close(kl_k3(logp, ref), torch.tensor([0.5 + math.log(2.0) - 1.0]))
    torch.testing.assert_close(kl_k3(ref, ref), torch.tensor([0.0]))


def test_aggregations() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert aggregate(values, token_mean_weights(mask)).item() == 2.0
    assert aggregate(values, seq_mean_token_mean_weights(mask)).item() == (1.5 + 3.0) / 2
    assert make_loss_weights("token-mean") is token_mean_weights
    # Dr. GRPO: token sums over a constant budget (4), averaged over the 2 rows.
    dr = make_loss_weights("seq-mean-token-sum-norm", norm_tokens=4.0)(mask)
    assert aggregate(values, dr).item() == ((1.0 + 2.0) / 4 + 3.0 / 4) / 2


def test_dr_grpo_weighs_a_token_the_same_in_short_and_long_trajectories() -> None:
    """The length bias behind the drift toward searching: under the per-trajectory mean a
    token of a short failed trajectory is pushed down harder than one of a long failed
    trajectory; under Dr. GRPO every trained token weighs the same."""
    short = [1.0] * 65 + [0.0] * 110
    long = [1.0] * 175
    mask = torch.tensor([short, long])
    seq_mean = seq_mean_token_mean_weights(mask)
    ratio = (seq_mean[0, 0] / seq_mean[1, 0]).item()
    assert abs(ratio - 175 / 65) < 1e-5  # ~2.7x
    dr = make_loss_weights("seq-mean-token-sum-norm", norm_tokens=600.0)(mask)
    assert dr[0, 0].item() == dr[1, 0].item() == pytest.approx(1 / (2 * 600))
    assert dr[0, 100].item() == 0.0  # padding / masked tokens still weigh nothing
    # the total weight of a trajectory now grows with its trained tokens
    assert dr[1].sum().item() > dr[0].sum().item()


def test_loss_weights_reject_unknown_names_and_bad_budgets() -> None:
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        make_loss_weights("sum")
    with pytest.raises(ValueError, match="norm_tokens"):
        make_loss_weights("seq-mean-token-sum-norm", norm_tokens=0)


def test_micro_batches_sum_to_the_mini_batch_loss() -> None:
    values = torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.4).float()
    weights = seq_mean_token_mean_weights(mask)
    whole = aggregate(values, weights)
    parts = aggregate(values[:2], weights[:2]) + aggregate(values[2:], weights[2:])
    torch.testing.assert_close(parts, whole)


def test_masking_switch() -> None:
    policy = torch.tensor([[1, 0, 1]])
    response = torch.tensor([[1, 1, 1]])
    assert training_mask(policy, response, mask_env=True).tolist() == [[1.0, 0.0, 1.0]]
    assert training_mask(policy, response, mask_env=False).tolist() == [[1.0, 1.0, 1.0]]


def test_masked_token_gets_exactly_zero_gradient() -> None:
    torch.manual_seed(0)
    logp = torch.randn(2, 5, requires_grad=True)
    old = logp.detach() + 0.01 * torch.randn(2, 5)
    ref = logp.detach() - 0.1
    adv = torch.randn(2, 5)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0, 0.0]])

    def grad_with(advantages: torch.Tensor) -> torch.Tensor:
        logp.grad = None
        pg, _ = ppo_clip(logp, old, advantages, 0.2)
        loss = aggregate(pg + 0.001 * kl_k3(logp, ref), seq_mean_token_mean_weights(mask))
        loss.backward()
        assert logp.grad is not None
        return logp.grad.clone()

    base = grad_with(adv)
    assert torch.all(base[mask == 0] == 0)
    perturbed = adv.clone()
    perturbed[mask == 0] += 1e3  # an env token's loss contribution changes wildly
    torch.testing.assert_close(grad_with(perturbed), base, rtol=0, atol=0)


def test_kl_penalized_rewards_put_score_on_last_trained_token() -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0]])
    old = torch.zeros(1, 5)
    ref = torch.full((1, 5), -1.0)
    out = kl_penalized_rewards(torch.tensor([1.0]), old, ref, mask, kl_coef=0.1)
    torch.testing.assert_close(out, torch.tensor([[-0.1, -0.1, 0.0, 0.9, 0.0]]))


def test_entropy_matches_definition() -> None:
    logits = torch.randn(2, 3, 7)
    p = logits.softmax(-1)
    expected = -(p * p.log()).sum(-1)
    torch.testing.assert_close(entropy_from_logits(logits), expected)


def test_k3_is_clamped_to_ten_like_verl() -> None:
    logp = torch.tensor([[-0.1, -0.1, -3.0]], requires_grad=True)
    ref = torch.tensor([[-30.0, 5.0, -3.0]])
    kl = kl_k3(logp, ref)
    assert float(kl.max()) == 10.0 and float(kl[0, 2]) == 0.0
    kl.sum().backward()
    assert logp.grad is not None and float(logp.grad[0, 1]) == 0.0  # clamped: no gradient
