"""The learning signal of an RL run as a measured budget (`train.signal`, `train.screening`).

A GRPO group whose rewards are all equal has zero advantage: it costs its rollouts and teaches
nothing. How many informative groups a run trains on, how far the policy moves from where it
started, and whether the quantity RL optimises (success at temperature 1) moves before greedy
EM does are what these settings measure; screening spends the rollouts where the gradient is
not zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from searchrl.config.checks import NonEmptyStr, NonNegativeInt, PositiveInt


@dataclass(frozen=True)
class SignalConfig:
    """What the run measures besides reward: `signal/*` (informative groups trained, sampled
    and per hour, ‖θ − θ₀‖, KL from the start on a fixed probe) and `probe/*` (pass@1 and
    pass@k at temperature 1 on fixed held-out questions)."""

    probe_every: NonNegativeInt = 0
    """Steps between probes (and before the first step, and after the last); 0: no probe.
    Each probe samples `probe_samples` trajectories of each probe question at the rollout
    temperature and runs one forward pass over the first probe's trajectories (the KL)."""
    probe_questions: NonNegativeInt = 32
    """Held-out questions in the probe (the first N of `probe_split` / `probe_files`)."""
    probe_samples: PositiveInt = 4
    """k of pass@k: samples per probe question."""
    probe_split: NonEmptyStr = "dev"
    """World split the probe questions come from (held out for choices: neither trained on
    nor reported). With `data.train_files`, give `probe_files` instead."""
    probe_files: tuple[str, ...] = ()
    """Probe questions from question files (specs as in `data.train_files`, `FILE[a:b]` row
    cuts); empty: the world's `probe_split`."""


@dataclass(frozen=True)
class ScreenConfig:
    """A screening pass before RL: every question of the pool is rolled out `samples` times
    at the rollout temperature by the start policy, and only questions it sometimes solves and
    sometimes fails (0 < successes < samples) are trained on. Their groups are the ones with a
    gradient. The verdicts are cached per start policy (its weights' fingerprint), question
    set, rollout settings and seed, so every run from the same warm start screens once."""

    samples: NonNegativeInt = 0
    """k samples per question; 0: no screening (every question of the pool is trained on)."""
    max_questions: NonNegativeInt = 0
    """Screen at most this many questions of the pool (its seeded order); 0: all of them."""
    cache_dir: str = ""
    """Where verdicts are cached; empty: `$XDG_CACHE_HOME/searchrl/screen` (`~/.cache`
    without it)."""
    gold_retrieved: bool = False
    """Real questions: first keep only questions whose gold answer appears in the passages
    the question itself retrieves (top `rollout.topk`, as the policy would be shown them):
    on the rest no reader can succeed from a first search."""
