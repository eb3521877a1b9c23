"""Packed forwards: the sequences of a micro-batch laid end to end in one row.

A padded micro-batch either wastes compute on pad columns (rows of different lengths) or, with
one sequence per micro-batch, runs many small forwards. Packing writes the real tokens of each
row one after the other into a single row, position ids restarting at 0 for every sequence,
and runs attention on each sequence's own slice, so no token attends across a boundary. The
per-token values come back in the padded `[b, R]` layout, so losses, masks and weights are
computed exactly as before.

Attention: transformers can build a block-diagonal mask from restarting position ids, but
SDPA then computes every (query, key) pair of the whole row: for 4 sequences of ~660 tokens
(bf16, one thread) a layer took 266 + 852 ms (forward + backward) against 54 + 200 ms for
SDPA's causal kernel run on each sequence's slice. So the sequence boundaries travel as
`cu_seq_lens_q` (the keyword transformers gives flash-attention's variable-length kernels)
into `packed_sdpa`, registered with transformers' attention interface. It is plain SDPA for
any call without boundaries, so a model switched to it generates and trains unpacked exactly
as before; with FlashAttention (GPU) the same keywords select its own variable-length kernel.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from searchrl.train.collate import Batch

PACKED_SDPA = "searchrl_packed_sdpa"


def packed_sdpa(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: Tensor | None = None,
    **kwargs: object,
) -> tuple[Tensor, None]:
    """SDPA on each packed sequence's slice (causal kernel, no mask) → [1, N, heads, dim];
    without `cu_seq_lens_q` exactly transformers' SDPA attention."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, **kwargs
        )
    bounds = cu_seq_lens_q.tolist()
    parts = [
        sdpa_attention_forward(
            module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout, scaling
        )[0]
        for s, e in itertools.pairwise(bounds)
    ]
    return torch.cat(parts, dim=1), None


AttentionInterface.register(PACKED_SDPA, packed_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, sdpa_mask)


def _hf_config(model: nn.Module) -> object | None:
    """The transformers config of `model`, through DDP's `.module` (peft forwards it)."""
    inner = getattr(model, "module", model)
    return getattr(inner, "config", None)


def enable_packing(model: nn.Module) -> bool:
    """Make `model` accept packed rows; False where it cannot (an attention implementation
    other than SDPA or FlashAttention). Switching SDPA to `packed_sdpa` is permanent on
    purpose: gradient checkpointing re-runs the forward during backward, which must see the
    same attention, and unpacked calls are unchanged by it."""
    config = _hf_config(model)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation == "sdpa":
        config._attn_implementation = PACKED_SDPA  # type: ignore[union-attr]
        return True
    return implementation == PACKED_SDPA or str(implementation).startswith("flash_attention")


@dataclass(frozen=True)
class Packed:
    """The real tokens of a padded batch's rows, end to end in one row."""

    input_ids: Tensor  # [1, N]
    position_ids: Tensor  # [1, N] restarting at 0 for every sequence
    cu_seq_lens: Tensor  # [b + 1] int32 sequence boundaries (0, n_0, n_0 + n_1, ...)
    response_start: Tensor  # [b] packed index of each row's response token 0
    max_length: int

    def kwargs(self) -> dict[str, object]:
        """Model keywords for a packed forward (the names transformers' attention uses)."""
        return {
            "input_ids": self.input_ids,
            # all ones: transformers then builds no mask (it would build a block-diagonal one
            # from the restarting positions); the boundaries below do the masking
            "attention_mask": torch.ones_like(self.input_ids),
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
        }

    def logit_index(self, rows: Tensor, columns: Tensor) -> Tensor:
        """Packed positions whose logits predict response token (`rows`, `columns`)."""
        return self.response_start[rows] + columns - 1


def pack(batch: Batch) -> Packed:
    """Pack a padded batch (prompt left-padded, response right-padded: each row's real tokens
    are contiguous)."""
    real = batch.attention_mask.bool()
    lengths = real.sum(1)  # [b]
    first = real.int().argmax(1)  # [b] column of each row's first real token
    prompt_width = batch.input_ids.shape[1] - batch.response_length
    starts = lengths.cumsum(0) - lengths  # [b] packed index of each row's first token
    total = int(lengths.sum())
    positions = torch.arange(total, device=lengths.device) - starts.repeat_interleave(lengths)
    cu = torch.cat([starts, lengths.sum(0, keepdim=True)]).to(torch.int32)
    return Packed(
        input_ids=batch.input_ids[real].unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        cu_seq_lens=cu,
        response_start=starts + prompt_width - first,
        max_length=int(lengths.max()),
    )
