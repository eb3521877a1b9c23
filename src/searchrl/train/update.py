"""Mini-batch updates of the policy (clipped surrogate + KL + entropy) and the critic.

Both go through `optimize`: for each mini-batch, accumulate gradients over micro-batches whose
losses are weighted so they sum to the mini-batch loss, clip the global norm, and step — unless
the gradient is NaN/inf, in which case the update is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from searchrl.algo.losses import KLEstimator, aggregate, ppo_clip, value_loss
from searchrl.models.weights import compute_device
from searchrl.train.collate import Batch
from searchrl.train.logprobs import EntropyMode, autocast, forward_logprobs, to_device
from searchrl.train.packing import micro_batches

# (micro-batch row indices, per-token loss weights of those rows) → (loss, logged stats)
MicroLoss = Callable[[list[int], Tensor], tuple[Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Experience:
    """Everything one step's update needs, computed before any weight changes. Rows follow
    the trajectories; `[N, R]` tensors are aligned with `batch.response_ids`."""

    batch: Batch
    mask: Tensor  # [N, R] tokens the loss sees (policy only, or all under the ablation)
    old_logp: Tensor  # [N, R] (zeros when the update is on-policy, see UpdateSettings)
    advantages: Tensor  # [N, R]
    ref_logp: Tensor | None = None  # [N, R] when the KL is a loss term
    returns: Tensor | None = None  # [N, R] PPO critic targets
    old_values: Tensor | None = None  # [N, R] PPO
    tis_weight: Tensor | None = None  # [N, R] truncated IS weights π_old/μ (engine mismatch)
    mismatch: dict[str, float] = field(default_factory=dict)  # behaviour/* metrics
    current_rows: frozenset[int] = frozenset()
    """Rows whose π_old is their detached log-prob in the update itself (old_logp is 0 there)."""


@dataclass(frozen=True)
class UpdateSettings:
    """Loop and loss settings shared by policy and critic updates."""

    micro_batch_size: int
    grad_clip: float
    bf16: bool
    temperature: float
    clip_eps: float
    kl_coef: float
    entropy_coef: float
    value_clip: float
    micro_batch_tokens: int = 0
    """Also cap a forward's tokens (0: rows only); see `packing.micro_batches`."""


def minibatches(n_rows: int, n_minibatches: int, generator: torch.Generator) -> list[list[int]]:
    """A seeded shuffle of the rows, split into `n_minibatches` near-equal parts."""
    order = torch.randperm(n_rows, generator=generator).tolist()
    size = -(-n_rows // max(n_minibatches, 1))
    return [order[i : i + size] for i in range(0, n_rows, size)]


def optimize(
    params: Sequence[nn.Parameter],
    optimizer: torch.optim.Optimizer,
    groups: Sequence[list[int]],
    weigh: Callable[[list[int]], Tensor],
    micro_batch_size: int,
    grad_clip: float,
    micro_loss: MicroLoss,
    prefix: str,
    lengths: Tensor | None = None,
    micro_batch_tokens: int = 0,
) -> dict[str, float]:
    """One optimizer step per mini-batch; `weigh(rows)` gives the per-token loss weights of a
    mini-batch's rows [len(rows), R] (the aggregation, e.g. `lambda rows:
    weights(mask[rows])`). Returns stats averaged over mini-batches, plus
    `<prefix>/grad_norm` and `<prefix>/skipped_updates` (NaN/inf gradients, not applied).
    With `lengths` ([N] tokens per row), micro-batches also hold at most `micro_batch_tokens`
    tokens."""
    totals: dict[str, float] = {}
    for rows in groups:
        row_weights = weigh(rows)  # [m, R]
        optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = {}
        sizes = [1] * len(rows) if lengths is None else lengths[rows].tolist()
        cap = micro_batch_tokens if lengths is not None else 0
        for part in micro_batches(sizes, micro_batch_size, cap):
            micro = [rows[i] for i in part]
            loss, micro_stats = micro_loss(micro, row_weights[part])
            loss.backward()
            for key, value in micro_stats.items():
                stats[key] = stats.get(key, 0.0) + value
        limit = grad_clip if grad_clip > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        finite = bool(torch.isfinite(torch.tensor(norm)))
        if finite:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        stats[f"{prefix}/grad_norm"] = norm if finite else 0.0
        stats[f"{prefix}/skipped_updates"] = float(not finite)
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    skipped = totals.pop(f"{prefix}/skipped_updates", 0.0)
    out = {k: v / max(len(groups), 1) for k, v in totals.items()}
    out[f"{prefix}/skipped_updates"] = skipped
    return out


def _micro_rows(exp: Experience, micro: list[int]) -> tuple[Batch, int]:
    """The trimmed micro-batch and its response width."""
    mb = exp.batch.select(micro)
    return mb, mb.response_length


def policy_micro_loss(
    model: nn.Module, exp: Experience, settings: UpdateSettings, kl: KLEstimator | None
) -> MicroLoss:
    """Clipped surrogate (+ β·KL to the reference when it is a loss term) − entropy bonus."""
    device = compute_device(model)
    entropy: EntropyMode = "grad" if settings.entropy_coef != 0 else "log"

    def loss_fn(micro: list[int], weights: Tensor) -> tuple[Tensor, dict[str, float]]:
        mb, width = _micro_rows(exp, micro)
        weights = weights[:, :width].to(device)  # [m, R']
        with autocast(settings.bf16, device):
            logp, ent = forward_logprobs(
                model, to_device(mb, device), settings.temperature, entropy, exp.mask[micro, :width]
            )
        fresh = torch.tensor([r in exp.current_rows for r in micro], device=device)[:, None]
        old = torch.where(fresh, logp.detach(), exp.old_logp[micro, :width].to(device))
        adv = exp.advantages[micro, :width].to(device)  # [m, R']
        pg, clipped = ppo_clip(logp, old, adv, settings.clip_eps)  # [m, R'] each
        if exp.tis_weight is not None:
            pg = pg * exp.tis_weight[micro, :width].to(device)
        assert ent is not None
        total = pg - settings.entropy_coef * ent
        stats = {
            "actor/pg_loss": float(aggregate(pg.detach(), weights)),
            "actor/pg_clipfrac": float(aggregate(clipped, weights)),
            "actor/entropy_loss": float(aggregate(ent.detach(), weights)),
            "actor/ppo_kl": float(aggregate((old - logp).detach(), weights)),
        }
        if kl is not None and exp.ref_logp is not None:
            kl_tok = kl(logp, exp.ref_logp[micro, :width].to(device))  # [m, R']
            total = total + settings.kl_coef * kl_tok
            stats["actor/kl_loss"] = float(aggregate(kl_tok.detach(), weights))
        return aggregate(total, weights), stats

    return loss_fn


def critic_micro_loss(critic: nn.Module, exp: Experience, settings: UpdateSettings) -> MicroLoss:
    """Clipped value regression towards the GAE returns."""
    device = compute_device(critic)

    def loss_fn(micro: list[int], weights: Tensor) -> tuple[Tensor, dict[str, float]]:
        if exp.returns is None or exp.old_values is None:
            raise ValueError("critic update needs returns and old values")
        mb, width = _micro_rows(exp, micro)
        weights = weights[:, :width].to(device)
        with autocast(settings.bf16, device):
            values = critic(to_device(mb, device)).float()  # [m, R']
        old = exp.old_values[micro, :width].to(device)
        returns = exp.returns[micro, :width].to(device)
        loss, clipped = value_loss(values, old, returns, settings.value_clip)
        stats = {
            "critic/vf_loss": float(aggregate(loss.detach(), weights)),
            "critic/vf_clipfrac": float(aggregate(clipped, weights)),
            "critic/vpred_mean": float(aggregate(values.detach(), weights)),
        }
        return aggregate(loss, weights), stats

    return loss_fn
