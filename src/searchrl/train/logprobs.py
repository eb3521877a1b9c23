"""Per-token log-probabilities (and entropies, values) of response tokens.

Only the positions whose log-probs are used go through the LM head (`logits_to_keep`): never
the prompt's, and with a loss mask only the tokens some caller uses (packed) or the columns
where some row of the micro-batch has one (padded). At 49k vocabulary entries the head is ~21%
of SmolLM2's weights and its fp32 log-softmax dominates memory traffic: skipping the
retrieved-passage positions made a training step ~40% faster on our CPU (217 → 307 tokens/s,
bf16, one thread).

The sequences of a micro-batch are packed into one row (`train.packing`) whenever the model's
attention allows it (SDPA, FlashAttention); the padded layout remains for other attention
implementations.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import torch
from torch import Tensor, nn

from searchrl.algo.losses import entropy_from_logits
from searchrl.models.weights import compute_device
from searchrl.train.collate import Batch
from searchrl.train.packing import PACKED_SDPA, enable_packing, micro_batches, pack

EntropyMode = Literal["grad", "log", "none"]


def autocast(enabled: bool, device: torch.device) -> AbstractContextManager[object]:
    """bf16 autocast for training forwards when enabled (fp32 master weights stay intact)."""
    if not enabled:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def response_logits(
    model: nn.Module, batch: Batch, temperature: float, columns: Tensor | None = None
) -> Tensor:
    """Logits that predict each response token → [b, R, V] (fp32), or only those predicting
    the response `columns` (1-D, sorted) → [b, K, V]."""
    width = batch.response_length
    if columns is None:
        keep: int | Tensor = width + 1
    else:  # response token t sits at column P + t, predicted by the logits at P + t − 1
        keep = columns + (batch.input_ids.shape[1] - width - 1)
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=keep,
        use_cache=False,
    )
    logits = (out.logits[:, :-1] if columns is None else out.logits).float()
    return logits if temperature == 1.0 else logits / temperature


def gather_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """log softmax(logits)[ids] without materializing the full log-softmax. [b,R,V],[b,R]."""
    picked = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # [b, R]
    return picked - torch.logsumexp(logits, dim=-1)


def used_columns(mask: Tensor | None) -> Tensor | None:
    """Response columns where any row has `mask` set ([b, R] → 1-D), or None for all."""
    if mask is None:
        return None
    columns = mask.bool().any(0).nonzero().squeeze(1)  # [K]
    return None if columns.numel() == mask.shape[1] else columns


def forward_logprobs(
    model: nn.Module,
    batch: Batch,
    temperature: float,
    with_entropy: EntropyMode,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Differentiable log-probs [b, R] for one micro-batch, and entropies [b, R] (or None).

    With `mask` ([b, R], the tokens the caller will use), only columns some row uses are
    computed; the others are 0. `with_entropy="grad"` keeps the entropy in the graph (entropy
    bonus); `"log"` computes it without gradient, so the softmax is not held for backward."""
    implementation = enable_packing(model)
    if implementation is not None:
        share_prefix = implementation == PACKED_SDPA
        return _packed_logprobs(model, batch, temperature, with_entropy, mask, share_prefix)
    columns = used_columns(mask)
    logits = response_logits(model, batch, temperature, columns)  # [b, K, V]
    ids = batch.response_ids if columns is None else batch.response_ids[:, columns]
    logp = gather_logprobs(logits, ids)  # [b, K]
    entropy = None
    if with_entropy == "grad":
        entropy = entropy_from_logits(logits)
    elif with_entropy == "log":
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    if columns is None:
        return logp, entropy
    return _scatter(logp, columns, batch.response_length), (
        None if entropy is None else _scatter(entropy, columns, batch.response_length)
    )


def _packed_logprobs(
    model: nn.Module,
    batch: Batch,
    temperature: float,
    with_entropy: EntropyMode,
    mask: Tensor | None,
    share_prefix: bool,
) -> tuple[Tensor, Tensor | None]:
    """`forward_logprobs` on the micro-batch packed into one row; only the used tokens go
    through the LM head, values are placed back at their `[b, R]` positions."""
    used = batch.response_mask.bool()
    if mask is not None:
        used = used & mask.bool()
    rows, columns = used.nonzero(as_tuple=True)  # row-major: packed order
    packed = pack(batch, share_prefix)
    out = model(
        **packed.kwargs(), logits_to_keep=packed.logit_index(rows, columns), use_cache=False
    )
    logits = out.logits[0].float()  # [K, V]
    if temperature != 1.0:
        logits = logits / temperature
    logp = gather_logprobs(logits, batch.response_ids[rows, columns])  # [K]
    entropy = None
    if with_entropy == "grad":
        entropy = entropy_from_logits(logits)
    elif with_entropy == "log":
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())

    def place(values: Tensor) -> Tensor:  # [K] → [b, R], zeros elsewhere (differentiable)
        return values.new_zeros(used.shape).index_put((rows, columns), values)

    return place(logp), None if entropy is None else place(entropy)


def _scatter(values: Tensor, columns: Tensor, width: int) -> Tensor:
    """[b, K] values of `columns` → [b, width], zeros elsewhere (differentiable)."""
    out = values.new_zeros(values.shape[0], width)
    return out.index_copy(1, columns, values)


def _pad_to(values: Tensor, width: int) -> Tensor:
    """Right-pad [b, r] with zeros to [b, width] (micro-batches are trimmed independently)."""
    return nn.functional.pad(values, (0, width - values.shape[1]))


@torch.no_grad()
def batched_logprobs(
    model: nn.Module,
    batch: Batch,
    micro_batch_size: int,
    temperature: float,
    bf16: bool,
    mask: Tensor | None = None,
    micro_batch_tokens: int = 0,
) -> Tensor:
    """Log-probs of the response tokens, micro-batched (at most `micro_batch_size` rows and,
    when > 0, `micro_batch_tokens` tokens a forward), no gradient → [B, R] (0 on pad, and
    with `mask` [B, R] only the masked-in tokens are guaranteed)."""
    device = compute_device(model)
    parts = []
    lengths = batch.attention_mask.sum(1).tolist()
    for rows in micro_batches(lengths, micro_batch_size, micro_batch_tokens):
        mb = batch.select(rows)
        used = None if mask is None else mask[rows, : mb.response_length]
        with autocast(bf16, device):
            logp, _ = forward_logprobs(model, to_device(mb, device), temperature, "none", used)
        parts.append(_pad_to(logp.float().cpu(), batch.response_length))
    return torch.cat(parts) * batch.response_mask


def logprobs_of_rows(
    model: nn.Module,
    batch: Batch,
    rows: Sequence[int],
    micro_batch_size: int,
    temperature: float,
    bf16: bool,
    mask: Tensor | None = None,
    micro_batch_tokens: int = 0,
) -> Tensor:
    """`batched_logprobs` of some rows only, in place in a [B, R] tensor of zeros (no forward
    pass at all when `rows` is empty)."""
    out = torch.zeros(batch.response_ids.shape)
    if not rows:
        return out
    rows = list(rows)
    sub = batch.select(rows)
    used = None if mask is None else mask[rows, : sub.response_length]
    logp = batched_logprobs(
        model, sub, micro_batch_size, temperature, bf16, used, micro_batch_tokens
    )  # [len(rows), R']
    out[rows, : sub.response_length] = logp
    return out


@torch.no_grad()
def batched_values(critic: nn.Module, batch: Batch, micro_batch_size: int, bf16: bool) -> Tensor:
    """Critic values V(s_t) before each response token, micro-batched. → [B, R] (0 on pad)."""
    device = compute_device(critic)
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
