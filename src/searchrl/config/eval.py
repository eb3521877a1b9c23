"""Configuration of `searchrl eval` (seed 000 "Evaluation Methodology"), the trajectory-quality
judge (seed 001 §5.6) and `searchrl report`. Evaluation is greedy by default, as in both papers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from searchrl.config.checks import (
    NonEmptyStr,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    Seed,
    UrlOrEmpty,
)
from searchrl.config.model import ModelConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig

Confidence = Annotated[float, Range(gt=0, lt=1)]
Resamples = Annotated[int, Range(ge=100)]
"""Fewer bootstrap resamples than this give intervals too noisy to print."""


def _greedy_rollout() -> RolloutConfig:
    """Greedy, as both papers evaluate; turns decoded 64 tokens a call so that one rambling
    turn does not hold a call whose other rows have stopped (`rollout.decode_chunk`)."""
    return RolloutConfig(temperature=0.0, decode_chunk=64)


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation: a method over question sets, written sample by sample to a folder."""

    method: NonEmptyStr = "search-r1"
    """A name from `searchrl.eval.METHODS` (direct, cot, rag, ircot, search-o1, r1, sft,
    rejection, search-r1, …)."""
    limit: NonNegativeInt = 0
    """Questions per set (the first N of each file); 0 = every question."""
    batch_size: PositiveInt = 16
    """Questions generated together; also the unit appended to `samples.jsonl` (a kill loses
    at most the batch in flight)."""
    seed: Seed = 0
    """Rollout seed (only matters when `rollout.temperature > 0`)."""
    bootstrap_resamples: Resamples = 2000
    """Resamples behind every 95% interval and paired test."""
    confidence: Confidence = 0.95
    """Confidence level of the intervals."""
    ircot_step_tokens: PositiveInt = 64
    """IRCoT: most tokens of one reasoning line (each line becomes the next query)."""
    reason_tokens: PositiveInt = 256
    """Search-o1: most tokens of one Reason-in-Documents call."""
    progress: bool = True
    """Show a progress bar with ETA."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The generation model (`--model`); the embedded default for prompted baselines."""
    rollout: RolloutConfig = field(default_factory=_greedy_rollout)
    """Budgets (B = `max_turns` searches, top-k, token limits) shared by every method."""
    refiner: RefinerConfig = field(default_factory=RefinerConfig)
    """`search-r2` only: τ (`margin`), N_max (`max_revisions`), `micro_batch_size`, and the
    baseline switches `discriminator` and `trimmer`; `enabled`, `joint` and the probes are
    training settings and are ignored here."""


@dataclass(frozen=True)
class RubricConfig:
    """The six-dimension trajectory-quality comparison of two evaluations."""

    kind: Literal["rule", "llm", "hybrid"] = "rule"
    """`rule` (the dimensions a rule can score), `llm` (all six by an OpenAI-compatible
    endpoint) or `hybrid` (rule where one exists, the endpoint for the rest)."""
    shown: Literal["single", "pair"] = "single"
    """`single`: the judge reads each trajectory on its own (§5.6: "scored independently");
    `pair`: both trajectories in one prompt, shown in a seeded random order."""
    url: UrlOrEmpty = ""
    """Base URL of an OpenAI-compatible API (`…/v1`); `/chat/completions` is appended."""
    model: str = ""
    """Model name sent to the endpoint."""
    api_key_env: NonEmptyStr = "OPENAI_API_KEY"
    """Environment variable holding the API key (sent as a bearer token when set)."""
    per_set: NonNegativeInt = 100
    """Paired trajectories sampled per set (the paper: 100 per dataset); 0 = every pair."""
    seed: Seed = 0
    """Seeds the pair sample and the order each pair is shown in."""
    timeout_s: PositiveFloat = 120.0
    """Per-request timeout."""
    retries: NonNegativeInt = 2
    """Retries after a failed request or an unparsable answer."""
    max_tokens: PositiveInt = 400
    """Completion budget of one judgement."""


@dataclass(frozen=True)
class ReportConfig:
    """What `searchrl report` embeds in the page."""

    max_trajectories: NonNegativeInt = 200
    """Trajectories embedded per evaluation (and per training run's last held-out step)."""
    reference_method: NonEmptyStr = "search-r1"
    """Method the others are paired against in the comparison table (first one if absent)."""
    bootstrap_resamples: Resamples = 2000
    """Resamples behind the paired tests computed for the page."""
