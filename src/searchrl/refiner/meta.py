"""The Meta-Refiner's two decisions from one set of answer log-probabilities.

The model reads a trajectory under the meta prompt and could answer 0 (accept) or k ∈ 1..T
(the earliest flawed step). From log P(answer k):

- Discriminator: revise iff log P(revise) − log P(no revision) > τ, where P(revise) =
  Σ_{k=1..T} P(k) and P(no revision) = P(0) (seed 001, Appendix E: margin ≥ 0.0).
- Trimmer: π_h(k) = P(k) / Σ_{j=1..T} P(j), the answer distribution renormalised over the valid
  steps; argmax at evaluation, a seeded draw in training.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


def logsumexp(values: Sequence[float]) -> float:
    """log Σ exp(v), stable; −inf for an empty or all −inf sequence."""
    top = max(values, default=-math.inf)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


@dataclass(frozen=True)
class Reading:
    """The meta prompt of one trajectory and the log-probabilities of its answers 0..T."""

    prompt: str
    prompt_ids: list[int]
    candidates: list[list[int]]
    """Token ids of the answers 0..T (what a decision segment holds)."""
    logprobs: list[float]
    """log P(answer k | meta prompt), k = 0..T."""

    @property
    def steps(self) -> int:
        """T, the number of numbered steps."""
        return len(self.logprobs) - 1

    @property
    def log_odds(self) -> float:
        """log P(revise) − log P(no revision)."""
        return logsumexp(self.logprobs[1:]) - self.logprobs[0]

    def revise(self, margin: float) -> bool:
        """The discriminator's decision at threshold τ = `margin`."""
        return self.steps > 0 and self.log_odds > margin

    def trimmer(self) -> list[float]:
        """π_h(k) for k = 1..T (sums to 1)."""
        norm = logsumexp(self.logprobs[1:])
        return [math.exp(v - norm) for v in self.logprobs[1:]]

    def cut(self, rng: random.Random | None) -> int:
        """The step to cut at: drawn from π_h with `rng`, or its argmax when `rng` is None
        (ties go to the earliest step)."""
        probs = self.trimmer()
        if rng is None:
            return 1 + max(range(len(probs)), key=lambda i: (probs[i], -i))
        draw, total = rng.random(), 0.0
        for k, p in enumerate(probs, start=1):
            total += p
            if draw < total:
                return k
        return len(probs)
