"""Correcting for a generation engine that samples at another precision than the trainer.

The engine (a bf16 copy, vLLM in bf16, or vLLM's fp32 kernels) samples from μ, a slightly different
distribution than the trainer's π_old computed in fp32. Treating the samples as on-policy
biases the gradient. Truncated importance sampling (Yao et al. 2025, "Your efficient RL
framework secretly brings you off-policy RL training") reweights each token's policy-gradient
term by w_t = min(π_old(y_t) / μ(y_t), C): the behaviour log-probs come from the engine, π_old
from the trainer's own recomputation before the update, and the cap C bounds the variance.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from searchrl.types import Trajectory


def behaviour_logprobs(trajectories: Sequence[Trajectory], width: int) -> Tensor:
    """The engine's log-probs aligned with the collated responses: [B, width], NaN where
    unknown (env text, padding, segments written without them, e.g. by the refiner)."""
    rows = torch.full((len(trajectories), width), float("nan"))
    for i, traj in enumerate(trajectories):
        column = 0
        for segment in traj.segments:
            size = len(segment.token_ids)
            if segment.logprobs is not None:
                rows[i, column : column + size] = torch.tensor(segment.logprobs)
            column += size
    return rows


def truncated_importance_weights(
    old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights min(exp(old − behaviour), cap) on trained tokens whose behaviour
    log-prob is known (1 elsewhere), and the mismatch they correct: mean and max |Δ log-prob|
    and the share of capped tokens.

    old_logp, behaviour_logp (NaN = unknown), mask: [B, R] → weights [B, R]."""
    trained = (mask > 0) & ~behaviour_logp.isnan()
    delta = (old_logp - behaviour_logp).masked_fill(~trained, 0.0)  # [B, R]
    ratio = delta.exp()
    weights = torch.where(trained, ratio.clamp(max=cap), torch.ones_like(ratio))
    count = max(int(trained.sum()), 1)
    stats = {
        "behaviour/logp_abs_diff_mean": float(delta.abs().sum() / count),
        "behaviour/logp_abs_diff_max": float(delta.abs().max()) if delta.numel() else 0.0,
        "behaviour/capped_share": float(((ratio > cap) & trained).sum() / count),
        "behaviour/weight_mean": float(weights[trained].mean()) if trained.any() else 1.0,
    }
    return weights, stats
