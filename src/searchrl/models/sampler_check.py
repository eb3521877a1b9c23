"""Does a generation engine sample from the policy's distribution? Two checks that can fail.

1. **Teacher-forced.** Every token an engine sampled is scored by the fp32 policy: its
   log-probability log p(y_t) and the entropy H_t of p at that position. For an exact sampler
   E[log p(y_t) | history] = −H_t, so d_t = log p(y_t) + H_t has mean zero at every position
   whatever came before (the d_t are martingale differences: uncorrelated, even within one
   sequence, and a row stopping at a stop string does not bias them). Their mean over N tokens
   has standard error sd(d)/√N. A sampler that favours likely tokens (a temperature below 1,
   a hidden top-k) gives a positive mean, one that spreads mass a negative mean; an engine
   computing at another precision than the fp32 policy shifts it by about H(p) − H(q) −
   KL(q‖p), which is why the check runs each engine in fp32 as well as in the dtype it picks.
2. **One-token draws.** At one position where the policy is confident (top token p ≈ 0.9,
   where a biased sampler shows most), many independent next-token draws from the engine are
   compared with the policy's softmax by a chi-square test over the likeliest tokens (each
   with at least 5 expected draws) and the rest pooled.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

Scored = tuple[Sequence[int], Sequence[bool]]
"""A whole token sequence and, per token, whether the engine sampled it (policy tokens)."""


@dataclass(frozen=True)
class Gap:
    """Mean of log p(y) + H over the sampled tokens, with its standard error."""

    mean: float
    se: float
    tokens: int
    mean_logprob: float
    mean_entropy: float

    @property
    def z(self) -> float:
        return self.mean / self.se if self.se > 0 else 0.0


@dataclass(frozen=True)
class Position:
    """A context and the policy's next-token probabilities there ([vocab], fp32)."""

    context: list[int]
    probs: torch.Tensor


@dataclass(frozen=True)
class Scores:
    """Per sampled token, under the fp32 policy: log p(y), the entropy H, the top token's
    probability, whether y was the top token, and where it was (sequence, position)."""

    logps: torch.Tensor
    entropies: torch.Tensor
    top_probs: torch.Tensor
    top_hits: torch.Tensor
    where: list[tuple[int, int]]


@torch.no_grad()
def teacher_forced(
    model: torch.nn.Module, sequences: Sequence[Scored], temperature: float = 1.0
) -> Scores:
    """Score every sampled token of `sequences` under softmax(logits / T) of `model` (one
    forward pass per sequence)."""
    logps, entropies, tops, hits, where = [], [], [], [], []
    for index, (ids, sampled) in enumerate(sequences):
        positions = [t for t in range(1, len(ids)) if sampled[t]]
        if not positions:
            continue
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0].float()
        logprobs = torch.log_softmax(logits / temperature, dim=-1)  # [len, vocab]
        rows = logprobs[torch.tensor(positions) - 1]  # [n, vocab]: logits at t-1 predict t
        chosen = torch.tensor([ids[t] for t in positions])
        logps.append(rows.gather(1, chosen[:, None]).squeeze(1))
        entropies.append(-(rows.exp() * rows).sum(-1))
        best = rows.max(-1)
        tops.append(best.values.exp())
        hits.append(best.indices == chosen)
        where.extend((index, t) for t in positions)
    if not logps:
        raise ValueError("no sampled tokens to score")
    return Scores(torch.cat(logps), torch.cat(entropies), torch.cat(tops), torch.cat(hits), where)


def gap(scores: Scores) -> Gap:
    """The teacher-forced statistic (module docstring)."""
    d = (scores.logps + scores.entropies).double()
    n = d.numel()
    se = float(d.std(unbiased=True)) / math.sqrt(n) if n > 1 else float("inf")
    return Gap(float(d.mean()), se, n, float(scores.logps.mean()), float(scores.entropies.mean()))


@dataclass(frozen=True)
class TopRate:
    """How often the sampled token was the policy's top token, against how often it should
    be (the mean top probability), with the standard error of their difference: a bounded
    statistic, so rare tokens cannot dominate it as they can log p(y)."""

    share: float
    expected: float
    se: float

    @property
    def z(self) -> float:
        return (self.share - self.expected) / self.se if self.se > 0 else 0.0


def top_rate(scores: Scores) -> TopRate:
    """Each hit is a Bernoulli draw with its own p = the top probability there."""
    p = scores.top_probs.double()
    n = p.numel()
    se = math.sqrt(float((p * (1 - p)).sum())) / n
    return TopRate(float(scores.top_hits.double().mean()), float(p.mean()), se)


@torch.no_grad()
def confident(
    model: torch.nn.Module,
    sequences: Sequence[Scored],
    scores: Scores,
    target: float = 0.9,
    align: int = 1,
) -> Position:
    """The sampled position whose top probability is closest to `target`; `align` > 1 keeps
    positions whose context length is 1 past a multiple of it (a vLLM engine then reuses all
    but the last context token of every draw from its prefix cache)."""
    tops = [(i, t, float(p)) for (i, t), p in zip(scores.where, scores.top_probs, strict=True)]
    usable = [t for t in tops if (t[1] - 1) % align == 0] or tops
    index, position, _ = min(usable, key=lambda t: abs(t[2] - target))
    context = list(sequences[index][0][:position])
    logits = model(input_ids=torch.tensor([context])).logits[0, -1].float()
    return Position(context, torch.softmax(logits, dim=-1))


@dataclass(frozen=True)
class ChiSquare:
    """Draws against the expected probabilities: statistic, degrees of freedom, p-value."""

    statistic: float
    dof: int
    p_value: float
    draws: int
    top_share: float
    """Share of draws that were the policy's top token (its probability is `top_prob`)."""
    top_prob: float


def likely_tokens(probs: torch.Tensor, n: int, min_expected: float = 5.0) -> dict[int, float]:
    """The tokens expected at least `min_expected` times in `n` draws, with their
    probabilities, likeliest first."""
    order = torch.argsort(probs, descending=True)
    bins: dict[int, float] = {}
    for token in order.tolist():
        if float(probs[token]) * n < min_expected:
            break
        bins[int(token)] = float(probs[token])
    return bins


def chi_square(draws: Counter[int], probs: torch.Tensor, min_expected: float = 5.0) -> ChiSquare:
    """Pearson's chi-square of `draws` against `probs` ([vocab]): one bin per token expected at
    least `min_expected` times, one bin for all the others."""
    n = sum(draws.values())
    return chi_square_bins(draws, likely_tokens(probs, n, min_expected), min_expected)


def chi_square_bins(
    draws: Counter[int], bins: dict[int, float], min_expected: float = 5.0
) -> ChiSquare:
    """Pearson's chi-square of `draws` against the probabilities of the tokens in `bins` (the
    first is taken as the top token), the remaining mass as one more bin."""
    from scipy.stats import chi2

    n = sum(draws.values())
    observed = [draws.get(t, 0) for t in bins]
    expected = [p * n for p in bins.values()]
    rest_observed = n - sum(observed)
    rest_expected = max(n - sum(expected), 0.0)
    if rest_expected >= min_expected:
        observed.append(rest_observed)
        expected.append(rest_expected)
    elif observed:  # the tail is too small to stand alone: fold it into the last bin
        observed[-1] += rest_observed
        expected[-1] += rest_expected
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    dof = max(len(observed) - 1, 1)
    top = next(iter(bins), -1)
    return ChiSquare(
        statistic, dof, float(chi2.sf(statistic, dof)), n, draws.get(top, 0) / max(n, 1),
        bins.get(top, 0.0),
    )  # fmt: skip


@torch.no_grad()
def engine_probs(
    backend: object, context: Sequence[int], tokens: Sequence[int]
) -> dict[int, float]:
    """The probabilities the engine itself gives `tokens` after `context`, at temperature 1
    (vLLM: its own log-probs; HF: the softmax of its runner's logits, in its generation
    dtype): what its sampler draws from, whatever the fp32 policy says."""
    from searchrl.models.hf_backend import HFBackend

    if isinstance(backend, HFBackend):
        ids = torch.tensor([list(context)], device=backend.device)
        probs = torch.softmax(backend._runner(input_ids=ids).logits[0, -1].float(), dim=-1)
        return {t: float(probs[t]) for t in tokens}
    (logprobs,) = backend.score([list(context)], [[[t] for t in tokens]])  # type: ignore[attr-defined]
    return {t: math.exp(lp) for t, lp in zip(tokens, logprobs, strict=True)}


@torch.no_grad()
def next_token_draws(
    backend: object, context: Sequence[int], n: int, temperature: float = 1.0, seed: int = 0
) -> Counter[int]:
    """`n` independent next-token draws after `context` from `backend`'s sampler. vLLM: `n`
    one-token requests of the same prompt (prefix-cached). HF: its own sampler
    (`sample_tokens`, one seeded generator per row, as a rollout seeds them) on the logits of
    its own forward pass over `context`, in its generation dtype: the HF backend's draw is a
    function of those two alone, and `n` prefills of a long context would take hours. vLLM
    draws one first, so that the others find the context in its prefix cache (requests
    scheduled together do not share blocks that are still being computed)."""
    from searchrl.models.generation import SamplingParams, sample_tokens
    from searchrl.models.hf_backend import HFBackend

    counts: Counter[int] = Counter()
    if isinstance(backend, HFBackend):
        runner = backend._runner
        logits = runner(input_ids=torch.tensor([list(context)], device=backend.device)).logits
        row = logits[0, -1].float()
        for start in range(0, n, 1000):
            size = min(1000, n - start)
            params = [SamplingParams(1, temperature, seed=seed + start + i) for i in range(size)]
            generators = [torch.Generator().manual_seed(p.seed) for p in params]
            tokens, _ = sample_tokens(row.expand(size, -1), params, generators)
            counts.update(tokens.tolist())
        return counts
    one = [SamplingParams(max_new_tokens=1, temperature=temperature)]
    counts.update(out.token_ids[0] for out in backend.generate([list(context)], one))  # type: ignore[attr-defined]
    for start in range(1, n, 2000):  # the first draw put the context in the prefix cache
        size = min(2000, n - start)
        params = [SamplingParams(max_new_tokens=1, temperature=temperature)] * size
        outputs = backend.generate([list(context)] * size, params)  # type: ignore[attr-defined]
        counts.update(out.token_ids[0] for out in outputs if out.token_ids)
    return counts
