"""Per-token losses and their masked aggregation.

All functions return per-token tensors `[B, T]`; `aggregate` turns them into a scalar with
weights that are zero off the trained tokens (retrieved-token masking: env tokens contribute
exactly nothing, and the normalizer counts policy tokens only, so more retrieved text does not
dilute the loss).

Departures from the paper:
- The paper's objective averages per trajectory, then over trajectories
  (`seq-mean-token-mean`); verl, which Search-R1 runs on, averages over all trained tokens of
  the mini-batch (`token-mean`). Both are offered, next to Dr. GRPO's `seq-mean-token-sum-norm`
  ("Understanding R1-Zero-like training", Liu et al. 2025): each trajectory's token losses are
  summed and divided by one constant token budget, so a token weighs the same whatever the
  length of its trajectory. Under the per-trajectory mean, a wrong answer after one search
  (~65 policy tokens) was pushed down ~2.7× harder per token than a trajectory that searched
  until the turn limit (~175 tokens): failing long was the cheapest way to fail, and every
  GRPO run here drifted toward more searches. The CPU presets use the Dr. GRPO aggregation.
- The masking-off ablation is `training_mask(..., mask_env=False)`: env tokens then enter the
  policy loss, the KL and the normalizer, as in the paper's "w/o masking" runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Weighting = Callable[[Tensor], Tensor]
KLEstimator = Callable[[Tensor, Tensor], Tensor]


def training_mask(policy_mask: Tensor, response_mask: Tensor, mask_env: bool) -> Tensor:
    """Tokens the loss sees: policy tokens only, or every real response token (ablation).

    policy_mask, response_mask: [B, T] → [B, T] float.
    """
    return (policy_mask if mask_env else response_mask).float()


def token_mean_weights(mask: Tensor) -> Tensor:
    """Each trained token of the batch weighs 1 / (trained tokens in the batch). [B, T]."""
    return mask / mask.sum().clamp(min=1.0)


def seq_mean_token_mean_weights(mask: Tensor) -> Tensor:
    """Each trained token weighs 1 / (its row's trained tokens · rows with any). [B, T]."""
    per_row = mask.sum(-1, keepdim=True)  # [B, 1]
    rows = (per_row > 0).sum().clamp(min=1)
    return mask / per_row.clamp(min=1.0) / rows


def seq_mean_token_sum_norm_weights(mask: Tensor, norm_tokens: float) -> Tensor:
    """Dr. GRPO: each trained token weighs 1 / (rows with any · `norm_tokens`), the same for
    a short and a long trajectory. [B, T]."""
    rows = (mask.sum(-1) > 0).sum().clamp(min=1)
    return mask / (rows * norm_tokens)


LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def make_loss_weights(name: str, norm_tokens: float = 1.0) -> Weighting:
    """Pick the aggregation once, at trainer construction (`norm_tokens` is the constant of
    `seq-mean-token-sum-norm`, e.g. the response token budget; the others ignore it).

    Aggregation is expressed as per-token weights computed on the whole mini-batch, so the
    loss of a micro-batch is just `(loss · weights[rows]).sum()` and gradient accumulation
    over micro-batches gives exactly the mini-batch loss.
    """
    if norm_tokens <= 0:
        raise ValueError(f"norm_tokens must be positive, got {norm_tokens}")
    table: dict[str, Weighting] = {
        "token-mean": token_mean_weights,
        "seq-mean-token-mean": seq_mean_token_mean_weights,
        "seq-mean-token-sum-norm": lambda mask: seq_mean_token_sum_norm_weights(mask, norm_tokens),
    }
    if name not in table:
        raise ValueError(f"unknown loss aggregation {name!r}; expected one of {list(table)}")
    return table[name]


def aggregate(values: Tensor, weights: Tensor) -> Tensor:
    """Weighted sum of per-token values: the scalar loss. [B, T], [B, T] → scalar."""
    return (values * weights).sum()


def ppo_clip(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_eps: float
) -> tuple[Tensor, Tensor]:
    """Clipped surrogate, as a loss to minimize. All inputs [B, T].

    Returns (loss [B, T], clipped [B, T] ∈ {0, 1}: the clipped branch was the active one).
    """
    ratio = torch.exp(logp - old_logp)  # [B, T]
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)  # [B, T]
    loss = torch.maximum(unclipped, clipped)  # [B, T] pessimistic bound
    return loss, (clipped > unclipped).float()


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, clip: float
) -> tuple[Tensor, Tensor]:
    """Clipped value regression 0.5·max((V − R)², (V_clip − R)²). All inputs [B, T].

    Returns (loss [B, T], clipped [B, T] ∈ {0, 1}).
    """
    v_clip = old_values + (values - old_values).clamp(-clip, clip)  # [B, T]
    plain = (values - returns) ** 2  # [B, T]
    bounded = (v_clip - returns) ** 2  # [B, T]
    return 0.5 * torch.maximum(plain, bounded), (bounded > plain).float()


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Plain estimator log π/π_ref (unbiased, can be negative). [B, T] → [B, T]."""
    return logp - ref_logp


KL_CLAMP = 10.0
"""verl clamps the k3 value to ±10: one token the reference finds very unlikely must not
dominate the loss (or its gradient) of a whole mini-batch."""


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Low-variance estimator r − log r − 1 with r = π_ref/π (≥ 0, unbiased), clamped to
    [−10, 10] as verl does. [B, T]."""
    log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)  # [B, T] guards exp overflow
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-KL_CLAMP, KL_CLAMP)


def make_kl(name: str) -> KLEstimator:
    """Pick the KL estimator once, at trainer construction."""
    table: dict[str, KLEstimator] = {"k1": kl_k1, "k3": kl_k3}
    if name not in table:
        raise ValueError(f"unknown KL estimator {name!r}; expected one of {list(table)}")
    return table[name]


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution at each position. [B, T, V] → [B, T].

    H = logsumexp(z) − Σ softmax(z)·z: one [B, T, V] temporary instead of two."""
    probs = torch.softmax(logits, dim=-1)  # [B, T, V]
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def kl_penalized_rewards(
    scores: Tensor, old_logp: Tensor, ref_logp: Tensor, mask: Tensor, kl_coef: float
) -> Tensor:
    """PPO's token rewards: −β·KL(old‖ref) on every trained token, plus the outcome score on
    the last trained token. scores [B]; the rest [B, T] → [B, T]."""
    rewards = -kl_coef * kl_k1(old_logp, ref_logp) * mask  # [B, T]
    positions = torch.arange(mask.shape[1], device=mask.device)  # [T]
    last = (positions * (mask > 0)).argmax(-1)  # [B] index of the last trained token
    has_tokens = mask.sum(-1) > 0  # [B]
    rows = torch.arange(mask.shape[0], device=mask.device)  # [B]
    rewards[rows, last] += scores * has_tokens.to(scores.dtype)
    return rewards
