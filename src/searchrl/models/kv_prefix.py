"""Reusing the KV cache across the turns of a multi-turn rollout.

Turn t+1's prompt is turn t's prompt + its generated tokens + the inserted observation, so the
keys and values of everything before the observation were already computed. Re-prefilling
them every turn costs far more than generating on a CPU (prefill of a 600-token context is
~160 GFLOP for a 135M model). The HF backend keeps, for each row it finished, the row's KV
(padding stripped) under its token sequence; the next call looks each prompt's longest cached
prefix up and only prefills the rest.

Layout of a batch built from prefixes (C = longest cached prefix, N = longest new part):
`[pad | cached prefix (right-aligned in C columns)] [pad | new tokens (right-aligned in N)]`;
the attention mask marks the pads and positions come from its running sum, so every row sees
exactly the positions it would have had without caching.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass(frozen=True)
class PrefixEntry:
    """The KV of one token sequence: per layer, keys and values of shape [heads, len, dim]."""

    tokens: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class PrefixStore:
    """Entries from the previous generate call; each call takes what it reuses and the rest is
    dropped, so the store never holds more than one call's worth of rows."""

    def __init__(self) -> None:
        self._entries: list[PrefixEntry] = []

    def add(self, entry: PrefixEntry) -> None:
        """Keep a finished row's KV for the next call."""
        self._entries.append(entry)

    def clear(self) -> None:
        """Forget everything (e.g. the weights changed)."""
        self._entries = []

    def take(self, prompts: Sequence[Sequence[int]]) -> list[PrefixEntry | None]:
        """For each prompt, the longest stored entry that is a strict prefix of it (at least
        one new token must remain to produce logits); then the store is emptied."""
        matches: list[PrefixEntry | None] = []
        for prompt in prompts:
            best = None
            for entry in self._entries:
                size = len(entry.tokens)
                longer = best is None or size > len(best.tokens)
                if size < len(prompt) and longer and tuple(prompt[:size]) == entry.tokens:
                    best = entry
            matches.append(best)
        self._entries = []
        return matches


def build_batch(
    prompts: Sequence[Sequence[int]],
    prefixes: Sequence[PrefixEntry | None],
    pad_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
    """(new token ids [rows, N], attention mask [rows, C + N], cache holding C columns)."""
    cached = [len(p.tokens) if p is not None else 0 for p in prefixes]
    news = [list(prompt[c:]) for prompt, c in zip(prompts, cached, strict=True)]
    width_c, width_n = max(cached), max(len(n) for n in news)
    step_ids = torch.full((len(prompts), width_n), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width_c + width_n), dtype=torch.long)
    for i, (new, c) in enumerate(zip(news, cached, strict=True)):
        if new:
            step_ids[i, width_n - len(new) :] = torch.tensor(new)
            attention[i, width_c + width_n - len(new) :] = 1
        attention[i, width_c - c : width_c] = 1
    cache = growing_cache()
    present = [p for p in prefixes if p is not None]
    if present:
        for keys, values in _stack(prefixes, present[0], width_c, device):
            layer = GrowingLayer()
            layer.update(keys, values)
            cache.layers.append(layer)
    return step_ids.to(device), attention.to(device), cache


class GrowingLayer(DynamicLayer):
    """A cache layer whose keys and values live in buffers with room to grow (doubling), so
    that a decode step writes its one new column instead of copying the whole cache, as
    transformers' `torch.cat` does: at 2,500 tokens of context that copy was 40 % of a lone
    row's decode step (115 MB a step for the 135M model). `keys`/`values` are views of the
    filled part; code that replaces them (selecting rows, dropping padding) makes the next
    update start a new buffer from what it left."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        have = self.get_seq_length()
        new = key_states.shape[-2]
        if not self._owns_views() or have + new > self._buffers[0].shape[-2]:  # type: ignore[index]
            self._regrow(key_states, value_states, have + new)
        keys_buffer, values_buffer = self._buffers  # type: ignore[misc]
        keys_buffer[:, :, have : have + new] = key_states
        values_buffer[:, :, have : have + new] = value_states
        self.keys = keys_buffer[:, :, : have + new]
        self.values = values_buffer[:, :, : have + new]
        return self.keys, self.values

    def _owns_views(self) -> bool:
        """Whether `keys` is still the filled part of this layer's own buffer."""
        buffers = self._buffers
        return (
            buffers is not None
            and self.keys.data_ptr() == buffers[0].data_ptr()
            and self.keys.shape[0] == buffers[0].shape[0]
        )

    def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        """New buffers of at least twice the filled length, holding what is cached now."""
        have = self.get_seq_length()
        capacity = max(2 * needed, 64)
        rows, heads = key_states.shape[:2]
        fresh = []
        for old, like in ((self.keys, key_states), (self.values, value_states)):
            buffer = like.new_empty((rows, heads, capacity, like.shape[-1]))
            if have:
                buffer[:, :, :have] = old
            fresh.append(buffer)
        self._buffers = (fresh[0], fresh[1])


def growing_cache() -> DynamicCache:
    """An empty cache that makes `GrowingLayer`s, one per model layer as it is first used."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


def _stack(
    prefixes: Sequence[PrefixEntry | None], model: PrefixEntry, width: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, keys and values [rows, heads, width, dim] with each prefix right-aligned."""
    layers = []
    for layer, (k_model, v_model) in enumerate(zip(model.keys, model.values, strict=True)):
        heads, _, dim = k_model.shape
        keys = k_model.new_zeros((len(prefixes), heads, width, dim), device=device)
        values = v_model.new_zeros((len(prefixes), heads, width, v_model.shape[-1]), device=device)
        for i, prefix in enumerate(prefixes):
            if prefix is not None:
                size = len(prefix.tokens)
                keys[i, :, width - size :] = prefix.keys[layer]
                values[i, :, width - size :] = prefix.values[layer]
        layers.append((keys, values))
    return layers


def extract(
    cache: DynamicCache, row: int, attention: torch.Tensor, tokens: Sequence[int]
) -> PrefixEntry:
    """Row `row`'s KV without padding; `tokens` are the ids those columns hold, in order."""
    keep = attention[row].bool()
    keys = [layer.keys[row][:, keep].clone() for layer in cache.layers]
    values = [layer.values[row][:, keep].clone() for layer in cache.layers]
    if keys and keys[0].shape[1] != len(tokens):
        raise RuntimeError(f"cache holds {keys[0].shape[1]} positions for {len(tokens)} tokens")
    return PrefixEntry(tuple(tokens), keys, values)


def drop_padding(cache: DynamicCache, attention: torch.Tensor) -> torch.Tensor:
    """Remove the cache columns that are padding in every remaining row (a long row left
    alone keeps the padding it had next to longer prompts, and every later step attended
    over it with a mask); returns the attention mask without them. A row left alone then
    has no padding at all, and decodes without a mask (`HFBackend._forward`)."""
    used = attention.bool().any(dim=0)  # [columns]
    if bool(used.all()):
        return attention
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, used]
        layer.values = layer.values[:, :, used]
    return attention[:, used]
