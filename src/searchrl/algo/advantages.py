"""Advantage estimators: GAE (PPO), GRPO group z-scores, RLOO and plain REINFORCE.

Every estimator has the same signature, `(AdvantageInputs) -> (advantages [B, T], returns
[B, T])`, so the trainer picks one by name once (`make_estimator`) and never branches on the
name again. `T` is the response length; `mask` is 1 on the tokens that are trained on.

Departures from the paper:
- GAE walks only over masked-in positions: an env token is not a decision of the policy, so
  the recursion skips it and carries the next value across it. With λ = γ = 1 (the paper's
  setting) this changes nothing: the advantage is still `R − V(s_t)`.
- GRPO divides by the *unbiased* group std plus `eps`, as verl (Search-R1's code base) does;
  a group whose rewards are all equal gets advantage 0, not NaN. `scale_by_std=False` gives
  the Dr. GRPO variant (mean-centering only).
- GAE advantages are whitened over the trained tokens of the batch (mean 0, variance 1), as
  verl's `compute_gae_advantage_return` does for Search-R1's PPO; the returns the critic
  regresses on are not. `whiten=False` keeps the raw advantages.
- REINFORCE (group size 1) uses the raw score as the advantage, which is what GRPO degenerates
  to in Search-R1's code when G = 1 (the mean of a single reward is taken as 0 there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class AdvantageInputs:
    """What any estimator may need; unused fields are ignored by the estimators that don't."""

    scores: Tensor  # [B] outcome reward per trajectory
    token_rewards: Tensor  # [B, T] per-token reward (score at the last trained token, − KL)
    mask: Tensor  # [B, T] 1 where the token is trained on
    group_ids: Sequence[str]  # [B] question uid of each trajectory
    values: Tensor | None = None  # [B, T] critic values V(s_t), PPO only


Estimator = Callable[[AdvantageInputs], tuple[Tensor, Tensor]]


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over the masked-in positions of each row.

    token_rewards, values, mask: [B, T]. Returns (advantages [B, T], returns [B, T]), both
    zero where mask is 0.
    """
    mask = mask.to(values.dtype)
    batch, length = values.shape
    next_value = torch.zeros(batch, dtype=values.dtype, device=values.device)  # [B]
    running = torch.zeros_like(next_value)  # [B] A_{t+1}
    advantages = torch.zeros_like(values)  # [B, T]
    for t in reversed(range(length)):
        m = mask[:, t]  # [B]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        candidate = delta + gamma * lam * running  # [B]
        # Masked positions leave the recursion state untouched (skip, don't reset).
        running = m * candidate + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = m * candidate
    returns = (advantages + values) * mask  # [B, T]
    return advantages, returns


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x − mean) / sqrt(var + eps) over the masked-in entries; 0 elsewhere. [B, T] → [B, T].

    The variance is the unbiased one (verl's), and the mean is not added back."""
    m = mask.to(values.dtype)
    count = m.sum().clamp(min=1.0)
    mean = (values * m).sum() / count
    var = (((values - mean) * m) ** 2).sum() / (count - 1).clamp(min=1.0)
    return (values - mean) * torch.rsqrt(var + eps) * m


def _group_index(group_ids: Sequence[str], device: torch.device) -> tuple[Tensor, int]:
    """Map uid strings to dense ints [B] (first-seen order) and return the number of groups."""
    dense: dict[str, int] = {}
    index = [dense.setdefault(g, len(dense)) for g in group_ids]
    return torch.tensor(index, device=device, dtype=torch.long), len(dense)


def _group_stats(scores: Tensor, group_ids: Sequence[str]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-trajectory group sum, count, sum of squares, and whether the group's rewards are all
    equal ([B] each). Statistics are float64: in float32 equal non-binary rewards (F1, format
    scores) leave a rounding residue that the std division blows up into a nonzero advantage."""
    index, n_groups = _group_index(group_ids, scores.device)  # [B]
    x = scores.double()
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=scores.device)
    sums = zeros.index_add(0, index, x)  # [G]
    counts = zeros.index_add(0, index, torch.ones_like(x))  # [G]
    squares = zeros.index_add(0, index, x * x)  # [G]
    high = zeros.scatter_reduce(0, index, x, "amax", include_self=False)  # [G]
    low = zeros.scatter_reduce(0, index, x, "amin", include_self=False)  # [G]
    return sums[index], counts[index], squares[index], (high == low)[index]


def grpo_scores(scores: Tensor, group_ids: Sequence[str], scale_by_std: bool, eps: float) -> Tensor:
    """(r − mean_group) / (std_group + eps), or only mean-centred. scores: [B] → [B].

    Singleton groups get mean 0 and std 1 so G = 1 reduces to REINFORCE, as in verl; any
    other group whose rewards are all equal gets exactly 0.
    """
    sums, counts, squares, flat = _group_stats(scores, group_ids)  # [B] each
    single = counts < 2  # [B]
    mean = torch.where(single, torch.zeros_like(sums), sums / counts)  # [B]
    # Unbiased variance: (Σr² − n·mean²) / (n − 1).
    var = (squares - counts * mean * mean) / (counts - 1).clamp(min=1)  # [B]
    std = torch.where(single, torch.ones_like(var), var.clamp(min=0).sqrt())  # [B]
    centred = torch.where(flat & ~single, torch.zeros_like(mean), scores.double() - mean)
    out = centred / (std + eps) if scale_by_std else centred
    return out.to(scores.dtype)


def rloo_scores(scores: Tensor, group_ids: Sequence[str]) -> Tensor:
    """Leave-one-out baseline: r_i − mean of the other members of the group. [B] → [B]."""
    sums, counts, _, flat = _group_stats(scores, group_ids)  # [B] each
    x = scores.double()
    others = (sums - x) / (counts - 1).clamp(min=1)  # [B]
    out = torch.where(counts > 1, torch.where(flat, torch.zeros_like(x), x - others), x)
    return out.to(scores.dtype)


def _broadcast(per_sequence: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Give every trained token of a trajectory its trajectory's advantage. [B] → [B, T]."""
    tokens = per_sequence[:, None] * mask.to(per_sequence.dtype)  # [B, T]
    return tokens, tokens


def make_estimator(
    name: str, *, gamma: float, lam: float, scale_by_std: bool, eps: float, whiten: bool = True
) -> Estimator:
    """Pick the estimator once, at trainer construction."""
    if name == "gae":

        def _gae(inp: AdvantageInputs) -> tuple[Tensor, Tensor]:
            if inp.values is None:
                raise ValueError("GAE needs critic values")
            advantages, returns = gae(inp.token_rewards, inp.values, inp.mask, gamma, lam)
            return (masked_whiten(advantages, inp.mask) if whiten else advantages), returns

        return _gae
    if name == "grpo":
        return lambda inp: _broadcast(
            grpo_scores(inp.scores, inp.group_ids, scale_by_std, eps), inp.mask
        )
    if name == "rloo":
        return lambda inp: _broadcast(rloo_scores(inp.scores, inp.group_ids), inp.mask)
    if name == "reinforce":
        return lambda inp: _broadcast(inp.scores, inp.mask)
    raise ValueError(f"unknown advantage estimator {name!r}")
