"""The trainer's rollouts push the policy's weights to the generation engine only when they
changed since the engine last saw them (every rollout call, evaluations included, used to
re-send the whole model), and an engine started on the policy holds its weights already."""

from __future__ import annotations

from typing import Any

import torch
from tests.unit.train.fakes import tiny_llama

from searchrl.models.generation import WeightSyncable
from searchrl.models.weights import weights_version
from searchrl.train.environment import sync_generation_weights
from searchrl.train.models import make_optimizer


class Recording:
    """A backend that records the syncs it is asked for."""

    owns_weights = True

    def __init__(self, policy: torch.nn.Module) -> None:
        self.synced_version: Any = weights_version(policy)  # started on these weights
        self.syncs = 0

    def sync_weights(self, source: torch.nn.Module, version: Any = None) -> bool:
        self.syncs += 1
        self.synced_version = version
        return True

    def release(self) -> None:
        self.synced_version = None  # as a sleeping engine discards its weights


def test_weights_reach_the_engine_only_after_they_change() -> None:
    policy = tiny_llama()
    backend = Recording(policy)
    sync_generation_weights(backend, policy)  # step 0's evaluation: just started, nothing to do
    assert backend.syncs == 0
    optimizer = make_optimizer(policy, 0.1, 0.0)  # fused AdamW: no version counter moves
    policy(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    sync_generation_weights(backend, policy)  # the next rollout: new weights
    sync_generation_weights(backend, policy)  # the evaluation after it: the same weights
    assert backend.syncs == 1
    with torch.no_grad():
        policy.model.norm.weight.mul_(0.5)
    sync_generation_weights(backend, policy)
    assert backend.syncs == 2
    assert isinstance(backend, WeightSyncable)
    backend.release()  # the engine slept through the update: unchanged weights reload
    sync_generation_weights(backend, policy)
    assert backend.syncs == 3
