"""Packed forwards: the sequences of a micro-batch laid end to end in one row.

A padded micro-batch either wastes compute on pad columns (rows of different lengths) or, with
one sequence per micro-batch, runs many small forwards. Packing writes the real tokens of each
row one after the other into a single row, position ids restarting for every sequence, and
runs attention on each sequence's own slice, so no token attends across a boundary. The
per-token values come back in the padded `[b, R]` layout, so losses, masks and weights are
computed exactly as before.

Shared prefix: every Search-R1 prompt starts with the same instruction (139 of the demo's
~660 tokens per reference), and the samples of a GRPO group share their whole prompt. Tokens
of a common prefix have the same hidden states in every sequence (attention is causal), so
the prefix is laid down once, before the sequences' remainders; each remainder attends to it
as if it were its own. Linear layers, norms and the MLP then skip (b − 1) copies of it.
Gradients are the same sum over sequences, accumulated through the one copy.

Attention: transformers can build a block-diagonal mask from restarting position ids, but
SDPA then computes every (query, key) pair of the whole row: for 4 sequences of ~660 tokens
(bf16, one thread) a layer took 266 + 852 ms (forward + backward) against 54 + 200 ms for
SDPA's causal kernel run on each sequence's slice. So the boundaries travel as `cu_seq_lens_q`
(the keyword transformers gives flash-attention's variable-length kernels) and
`shared_prefix` into `packed_sdpa`, registered with transformers' attention interface. It is
plain SDPA for any call without boundaries, so a model switched to it generates and trains
unpacked exactly as before. Under FlashAttention (GPU) the same keywords select its own
variable-length kernel; the prefix is not shared there.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
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
    shared_prefix: int = 0,
    **kwargs: object,
) -> tuple[Tensor, None]:
    """Causal SDPA (no mask: the fast kernel) per packed sequence → [1, N, heads, dim].

    The row is `shared_prefix` tokens, then each sequence's remainder between consecutive
    `cu_seq_lens_q` bounds. A remainder's queries run behind the prefix's ([prefix; own]), so
    the kernel's causal mask is the sequence's own; only the first sequence keeps the prefix
    rows of its output. Without `cu_seq_lens_q`: exactly transformers' SDPA attention."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, **kwargs
        )
    p = shared_prefix
    sizes = [e - s for s, e in itertools.pairwise(cu_seq_lens_q.tolist())]
    # one split per tensor, not a slice per sequence: each slice's backward writes a zero
    # tensor of the whole row (b² traffic; 10% of a packed SFT step at b = 8), a split's
    # backward concatenates the pieces' gradients once
    pieces = [torch.split(x, [p, *sizes], dim=2) for x in (query, key, value)]
    parts = []
    for i in range(len(sizes)):
        q, k, v = (torch.cat([x[0], x[i + 1]], dim=2) if p else x[i + 1] for x in pieces)
        out = sdpa_attention_forward(module, q, k, v, None, dropout, scaling)[0]
        parts.append(out if i == 0 else out[:, p:])
    return torch.cat(parts, dim=1), None


AttentionInterface.register(PACKED_SDPA, packed_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, sdpa_mask)


def _hf_config(model: nn.Module) -> object | None:
    """The transformers config of `model`, through DDP's `.module` (peft forwards it)."""
    inner = getattr(model, "module", model)
    return getattr(inner, "config", None)


def enable_packing(model: nn.Module) -> str | None:
    """Make `model` accept packed rows; returns its attention implementation, or None where
    it cannot take them (anything but SDPA or FlashAttention). Switching SDPA to
    `packed_sdpa` is permanent on purpose: gradient checkpointing re-runs the forward during
    backward, which must see the same attention, and unpacked calls are unchanged by it."""
    config = _hf_config(model)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation == "sdpa":
        config._attn_implementation = PACKED_SDPA  # type: ignore[union-attr]
        return PACKED_SDPA
    if implementation == PACKED_SDPA or str(implementation).startswith("flash_attention"):
        return str(implementation)
    return None


@dataclass(frozen=True)
class Packed:
    """The real tokens of a padded batch's rows in one row: a shared prefix, then each row's
    remainder."""

    input_ids: Tensor  # [1, N]
    position_ids: Tensor  # [1, N] each remainder continues after the prefix
    cu_seq_lens: Tensor  # [b + 1] int32 bounds of the remainders (starts at the prefix)
    shared_prefix: int
    response_start: Tensor  # [b] packed index of each row's response token 0 (may be shared)
    max_length: int

    def kwargs(self) -> dict[str, object]:
        """Model keywords for a packed forward (the names transformers' attention uses)."""
        out: dict[str, object] = {
            "input_ids": self.input_ids,
            # all ones: transformers then builds no mask (it would build a block-diagonal one
            # from the restarting positions); the bounds below do the masking
            "attention_mask": torch.ones_like(self.input_ids),
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
        }
        if self.shared_prefix:
            out["shared_prefix"] = self.shared_prefix
        return out

    def logit_index(self, rows: Tensor, columns: Tensor) -> Tensor:
        """Packed positions whose logits predict response token (`rows`, `columns`): position
        t − 1 of the row's own tokens, inside the shared prefix when t − 1 falls there."""
        own = self.response_start[rows] + columns - 1
        prefix_end = self.cu_seq_lens[rows].long()  # where each row's remainder starts
        before = own < prefix_end  # the position is one of the row's prefix tokens
        return torch.where(before, own - prefix_end + self.shared_prefix, own)


def common_prefix(rows: list[Tensor]) -> int:
    """Length of the longest prefix all 1-D token tensors share."""
    shortest = min(int(r.numel()) for r in rows)
    stacked = torch.stack([r[:shortest] for r in rows])  # [b, shortest]
    differs = (stacked != stacked[:1]).any(0).nonzero()
    return int(differs[0]) if differs.numel() else shortest


def pack(batch: Batch, share_prefix: bool) -> Packed:
    """Pack a padded batch (prompt left-padded, response right-padded: each row's real tokens
    are contiguous); with `share_prefix` the rows' common prefix is laid down once (each row
    keeps at least one token of its own)."""
    real = batch.attention_mask.bool()
    rows = [batch.input_ids[i][real[i]] for i in range(real.shape[0])]
    lengths = real.sum(1)  # [b]
    shared = share_prefix and len(rows) > 1
    prefix = min(common_prefix(rows), int(lengths.min()) - 1) if shared else 0
    own = lengths - prefix  # [b] tokens after the prefix
    starts = prefix + own.cumsum(0) - own  # [b] packed index of each remainder
    positions = [torch.arange(prefix)] + [torch.arange(prefix, int(n)) for n in lengths]
    prompt_width = batch.input_ids.shape[1] - batch.response_length
    first = real.int().argmax(1)  # [b] column of each row's first real token
    return Packed(
        input_ids=torch.cat([rows[0][:prefix]] + [r[prefix:] for r in rows]).unsqueeze(0),
        position_ids=torch.cat(positions).to(lengths.device).unsqueeze(0),
        cu_seq_lens=torch.cat([starts, (prefix + own.sum()).reshape(1)]).to(torch.int32),
        shared_prefix=prefix,
        # row i's own position j sits at starts[i] + j − prefix (when j ≥ prefix)
        response_start=starts + (prompt_width - first) - prefix,
        max_length=int(lengths.max()),
    )


def micro_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Positions 0..n−1, in order, cut into micro-batches of at most `max_rows` rows and, when
    `max_tokens` > 0, at most that many tokens (a row longer than that goes alone). Packed,
    a forward's time and memory follow its tokens, not its rows: the cap lets short rows share
    a forward while a few long ones cannot exhaust memory."""
    out: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i, n in enumerate(lengths):
        full = len(current) >= max_rows or (max_tokens > 0 and tokens + n > max_tokens)
        if current and full:
            out.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += int(n)
    if current:
        out.append(current)
    return out
