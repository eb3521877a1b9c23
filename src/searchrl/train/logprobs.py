"""Per-token log-probabilities (and entropies, values) of response tokens.

Only the last `R + 1` positions go through the LM head (`logits_to_keep`): the prompt's
logits are never needed, and the vocabulary projection dominates memory at 49k tokens.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import torch
from torch import Tensor, nn

from searchrl.algo.losses import entropy_from_logits
from searchrl.train.collate import Batch

EntropyMode = Literal["grad", "log", "none"]


def autocast(enabled: bool, device: torch.device) -> AbstractContextManager[object]:
    """bf16 autocast for training forwards when enabled (fp32 master weights stay intact)."""
    if not enabled:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def response_logits(model: nn.Module, batch: Batch, temperature: float) -> Tensor:
    """Logits that predict each response token. → [b, R, V] (fp32)."""
    width = batch.response_length
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=width + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1].float()  # [b, R, V]
    return logits if temperature == 1.0 else logits / temperature


def gather_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """log softmax(logits)[ids] without materializing the full log-softmax. [b,R,V],[b,R]."""
    picked = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # [b, R]
    return picked - torch.logsumexp(logits, dim=-1)


def forward_logprobs(
    model: nn.Module, batch: Batch, temperature: float, with_entropy: EntropyMode
) -> tuple[Tensor, Tensor | None]:
    """Differentiable log-probs [b, R] for one micro-batch, and entropies [b, R] (or None).

    `with_entropy="grad"` keeps the entropy in the graph (entropy bonus); `"log"` computes it
    without gradient, so the [b, R, V] softmax is not held for the backward pass."""
    logits = response_logits(model, batch, temperature)  # [b, R, V]
    logp = gather_logprobs(logits, batch.response_ids)  # [b, R]
    if with_entropy == "grad":
        return logp, entropy_from_logits(logits)
    if with_entropy == "log":
        with torch.no_grad():
            return logp, entropy_from_logits(logits.detach())
    return logp, None


def _pad_to(values: Tensor, width: int) -> Tensor:
    """Right-pad [b, r] with zeros to [b, width] (micro-batches are trimmed independently)."""
    return nn.functional.pad(values, (0, width - values.shape[1]))


@torch.no_grad()
def batched_logprobs(
    model: nn.Module, batch: Batch, micro_batch_size: int, temperature: float, bf16: bool
) -> Tensor:
    """Log-probs of every response token, micro-batched, no gradient. → [B, R] (0 on pad)."""
    device = next(model.parameters()).device
    parts = []
    for start in range(0, batch.input_ids.shape[0], micro_batch_size):
        mb = batch.select(range(start, min(start + micro_batch_size, batch.input_ids.shape[0])))
        with autocast(bf16, device):
            logp, _ = forward_logprobs(model, to_device(mb, device), temperature, "none")
        parts.append(_pad_to(logp.float().cpu(), batch.response_length))
    return torch.cat(parts) * batch.response_mask


@torch.no_grad()
def batched_values(critic: nn.Module, batch: Batch, micro_batch_size: int, bf16: bool) -> Tensor:
    """Critic values V(s_t) before each response token, micro-batched. → [B, R] (0 on pad)."""
    device = next(critic.parameters()).device
    parts = []
    for start in range(0, batch.input_ids.shape[0], micro_batch_size):
        mb = batch.select(range(start, min(start + micro_batch_size, batch.input_ids.shape[0])))
        with autocast(bf16, device):
            values = critic(to_device(mb, device))
        parts.append(_pad_to(values.float().cpu(), batch.response_length))
    return torch.cat(parts) * batch.response_mask


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Move every tensor of the batch (no-op on CPU)."""
    if device.type == "cpu":
        return batch
    return Batch(**{k: v.to(device) for k, v in vars(batch).items()})
