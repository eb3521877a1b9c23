"""The one generation interface every backend implements, and the sampling and stopping rules
they share.

A backend takes token-id prompts and returns, per prompt, the generated token ids exactly as
sampled (never re-tokenized), their log-probs, and why generation stopped. Each row carries its
own seed, so a row's tokens do not depend on which other rows share its batch: a rollout that
resumes from a prefix reproduces the original continuation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

StopReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one row. `temperature == 0` is greedy; `stop` strings end the row as soon
    as the decoded output contains one (the tokens up to and including the one completing it
    are kept, nothing after)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    continues: bool = False
    """The caller may extend this row's prompt + output in a later call (multi-turn), so a
    backend may keep its KV cache for reuse."""


@dataclass(frozen=True)
class Generation:
    """One row's output. `logprobs[i]` is the log-probability of `token_ids[i]` under the
    distribution it was sampled from (after temperature and top-p); greedy rows report the
    model's untempered log-probability. `text` is the decoding of `token_ids` (special tokens
    kept) and may run a few characters past the stop string when it ends mid-token."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    stop_reason: StopReason
    stop_string: str | None = None


class GenerationBackend(Protocol):
    """Anything that turns prompts into `Generation`s (HF transformers, vLLM, scripted fakes)."""

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One `Generation` per prompt, in order; `params[i]` applies to `prompts[i]`."""
        ...


@runtime_checkable
class WeightSyncable(Protocol):
    """A backend that generates from its own copy of a trainer's weights (vLLM, the HF
    backend's converted copy): the trainer pushes new weights with `sync_weights` after each
    update, and may ask it to hand its memory back until then (`release`)."""

    synced_version: int | None
    """`models.weights.weights_version` of the weights it holds (None: unknown)."""

    @property
    def owns_weights(self) -> bool:
        """Whether it generates from a copy, so the trainer's module may change meanwhile."""
        ...

    def sync_weights(self, source: Any, version: int | None = None) -> bool:
        """Load `source`'s weights (a module, or anything with `state_dict()` and a
        transformers `config`) unless it holds `version` already; returns whether it loaded."""
        ...

    def release(self) -> None:
        """Hand its memory back until the next `sync_weights` (or do nothing)."""
        ...


class DecodeFn(Protocol):
    """`tokenizer.decode` with special tokens kept."""

    def __call__(self, token_ids: list[int]) -> str: ...


class StopChecker:
    """Decides, token by token, whether a row is finished: EOS, a stop string completed by the
    newest token, or the length limit. Decodes the row's whole output each step so stop strings
    split across tokens (or ending mid-token) are found at the first token completing them."""

    def __init__(self, decode: DecodeFn, eos_ids: frozenset[int], params: SamplingParams):
        self._decode = decode
        self._eos_ids = eos_ids
        self._params = params

    def check(self, token_ids: list[int]) -> tuple[StopReason, str | None] | None:
        """(reason, stop string) when `token_ids` must end here, else None."""
        if token_ids and token_ids[-1] in self._eos_ids:
            return "eos", None
        if self._params.stop:
            text = self._decode(token_ids)
            for stop in self._params.stop:
                if stop in text:
                    return "stop", stop
        if len(token_ids) >= self._params.max_new_tokens:
            return "length", None
        return None


def sample_tokens(
    logits: torch.Tensor,  # [rows, vocab]
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token and its log-prob for each row ([rows] each).

    Each row draws one uniform number from its own generator and inverts its CDF, so the result
    depends only on that row's logits and generator, not on the batch around it.
    """
    logits = logits.float()
    raw_logprobs = torch.log_softmax(logits, dim=-1)  # [rows, vocab]
    greedy = torch.tensor([p.temperature <= 0 for p in params], device=logits.device)
    tokens = raw_logprobs.argmax(dim=-1)  # [rows]
    logprobs = raw_logprobs.gather(1, tokens[:, None]).squeeze(1)  # [rows]
    if bool(greedy.all()):
        return tokens, logprobs
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params])
    probs = torch.softmax(logits / temps.to(logits.device)[:, None], dim=-1)  # [rows, vocab]
    top_p = torch.tensor([p.top_p for p in params], device=logits.device)
    if bool((top_p < 1.0).any()):
        probs = nucleus(probs, top_p)
    cdf = probs.cumsum(dim=-1)  # [rows, vocab]
    uniforms = torch.cat([torch.rand(1, generator=g) for g in generators]).to(logits.device)
    targets = (uniforms * cdf[:, -1]).contiguous()[:, None]  # [rows, 1]
    sampled = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    sampled = sampled.clamp(max=probs.shape[-1] - 1)  # [rows]
    chosen = probs.gather(1, sampled[:, None]).squeeze(1) / cdf[:, -1]
    tokens = torch.where(greedy, tokens, sampled)
    logprobs = torch.where(greedy, logprobs, chosen.log())
    return tokens, logprobs


def nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every token outside the smallest set whose mass reaches `top_p` (per row); the most
    likely token always survives."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [rows, vocab]
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter(1, order, sorted_probs)


def eos_token_ids(tokenizer: object, model: object | None = None) -> frozenset[int]:
    """Every id that ends generation: the tokenizer's EOS plus the model's generation config."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    generation_config = getattr(model, "generation_config", None)
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, (list, tuple)):
        ids.update(int(i) for i in configured)
    return frozenset(ids)
