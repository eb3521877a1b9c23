"""Pure, mask-aware tensor math for RL: advantage estimators and per-token losses.

Imports only `searchrl.types` and torch, so it can be tested without models or data."""

from searchrl.algo.advantages import AdvantageInputs, Estimator, gae, make_estimator
from searchrl.algo.losses import (
    aggregate,
    entropy_from_logits,
    kl_k1,
    kl_k3,
    kl_penalized_rewards,
    make_kl,
    make_loss_weights,
    ppo_clip,
    training_mask,
    value_loss,
)

__all__ = [
    "AdvantageInputs",
    "Estimator",
    "aggregate",
    "entropy_from_logits",
    "gae",
    "kl_k1",
    "kl_k3",
    "kl_penalized_rewards",
    "make_estimator",
    "make_kl",
    "make_loss_weights",
    "ppo_clip",
    "training_mask",
    "value_loss",
]
