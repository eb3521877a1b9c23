"""Settings of `searchrl rollout` and `searchrl chat`: a model answering questions with the
search engine, outside training (`--config FILE` may hold any of these sections)."""

from __future__ import annotations

from dataclasses import dataclass, field

from searchrl.config.checks import Seed
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig


@dataclass(frozen=True)
class InteractiveConfig:
    """The model and the rollout settings of `rollout` and `chat`."""

    seed: Seed = 0
    """Rollout seed (`--seed`); per-trajectory seeds derive from it."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model (`--model`): a trained run's `model/` folder, a hub id, a `.gguf` file, or
    `embedded`."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Turn budget, top-k, token limits and sampling; a trained run's own settings unless
    `--no-run-settings` (see `searchrl rollout --help`)."""
