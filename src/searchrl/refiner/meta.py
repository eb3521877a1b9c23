"""The Meta-Refiner's two decisions from one set of answer log-probabilities.

The model reads a trajectory under the meta prompt and could answer 0 (accept) or k ∈ 1..T
(the earliest flawed step). From log P(answer k):

- Discriminator: revise iff log P(revise) − log P(no revision) > τ, where P(revise) =
  Σ_{k=1..T} P(k) and P(no revision) = P(0) (seed 001, Appendix E: margin ≥ 0.0).
- Calibration (not in the paper): a model that knows nothing spreads its mass evenly over the
  T + 1 answers, so its log-odds are log T and it revises more the longer the trajectory is.
  With `refiner.calibration: content_free` the log-odds of a content-free meta prompt with
  the same T (every text replaced by "N/A", Zhao et al. 2021, "Calibrate before use") are
  subtracted first (`Reading.prior`), so τ = 0 means "more likely flawed than an empty
  transcript of this length".
- Trimmer: π_h(k) = P(k) / Σ_{j=1..T} P(j), the answer distribution renormalised over the valid
  steps; argmax at evaluation, a seeded draw in training. With `refiner.trimmer: checked`
  (not in the paper) a step that a check of the transcript shows wrong takes all the mass.
  With `refiner.trim_surprisal` = β > 0 (not in the paper) π_h(k) ∝ P(k) · s_k^β, s_k the
  largest surprisal −log π of a token the Actor wrote in step k
  (`refiner.confidence.step_surprisal`): the meta prompt knows which steps look like flaws,
  the Actor's confidence which of its own it was unsure of.
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
    prior: float = 0.0
    """Log-odds of the content-free prompt with the same T (0: uncalibrated)."""
    tilt: tuple[float, ...] = ()
    """Log-weights added to the answers 1..T for the trimmer alone (`refiner.trim_surprisal`:
    β · ln of each step's largest token surprisal); empty: the paper's π_h."""
    checked: int = 0
    """The earliest step a check of the transcript shows wrong (`refiner.trimmer: checked`,
    `refiner.rule.checked_step`): the trimmer cuts there; 0: none fired, π_h decides."""

    @property
    def steps(self) -> int:
        """T, the number of numbered steps."""
        return len(self.logprobs) - 1

    @property
    def log_odds(self) -> float:
        """log P(revise) − log P(no revision)."""
        return logsumexp(self.logprobs[1:]) - self.logprobs[0]

    @property
    def score(self) -> float:
        """The log-odds the discriminator thresholds: `log_odds` − `prior`."""
        return self.log_odds - self.prior

    def revise(self, margin: float) -> bool:
        """The discriminator's decision at threshold τ = `margin`."""
        return self.steps > 0 and self.score > margin

    def trimmer(self) -> list[float]:
        """π_h(k) for k = 1..T (sums to 1), times e^tilt(k) before normalising when tilted;
        all on the checked step where a check fired."""
        if self.checked:
            return [float(k == self.checked) for k in range(1, self.steps + 1)]
        logits = self.logprobs[1:]
        if self.tilt:
            logits = [v + w for v, w in zip(logits, self.tilt, strict=True)]
        norm = logsumexp(logits)
        return [math.exp(v - norm) for v in logits]

    def cut(self, rng: random.Random | None) -> int:
        """The step to cut at: drawn from π_h with `rng`, or its argmax when `rng` is None
        (ties go to the earliest step)."""
        probs = self.trimmer()
        if rng is None:
            return 1 + max(range(len(probs)), key=lambda i: (probs[i], -i))
        return draw_step(probs, rng)


def draw_step(probs: Sequence[float], rng: random.Random) -> int:
    """A step k ∈ 1..len(probs) drawn with probabilities `probs` (they need not sum to 1)."""
    draw, total = rng.random() * sum(probs), 0.0
    for k, p in enumerate(probs, start=1):
        total += p
        if draw < total:
            return k
    return len(probs)


def average_cut(distributions: Sequence[Sequence[float]]) -> list[float]:
    """The batch-average cut distribution π̄(k) = mean over trajectories of π_h(k | y), with
    π_h(k | y) = 0 beyond y's T. A cut drawn from it (restricted to 1..T) knows where the
    trimmer tends to cut, but not which trajectory it is cutting: the paper's no-skill
    baseline Σ_k E[π_h(k)]·E[G_k] for the trimming skill S_trim."""
    width = max((len(d) for d in distributions), default=0)
    mean = [0.0] * width
    for dist in distributions:
        for k, p in enumerate(dist):
            mean[k] += p / len(distributions)
    return mean
