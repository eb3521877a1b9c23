"""Generation overlapped with training (see `train.overlap`)."""

from __future__ import annotations

from dataclasses import dataclass

from searchrl.config.checks import PositiveInt


@dataclass(frozen=True)
class OverlapConfig:
    """While the trainer updates on step t, the generation engine already rolls out the next
    steps with the weights it has (one-step off-policy, as veRL, SkyRL and AReaL offer; the
    Search-R1 paper trains synchronously). The samples then lag the trained policy by up to
    `max_staleness` updates, which the truncated importance correction reweights
    (`algo.behaviour_correction` must not be `off`)."""

    enabled: bool = False
    """Roll out ahead in a background thread. Needs an engine with its own copy of the
    weights (vllm, or hf with a generation copy)."""
    max_staleness: PositiveInt = 1
    """Most optimizer updates between the weights a trajectory was sampled with and the
    policy it trains (= how many steps are rolled out ahead). 1 is exact with dynamic
    sampling; beyond 1, a step whose extra sampling rounds draw more prompts than predicted
    throws away the rollouts planned after it."""
