"""`benchmarks/baselines.py` keeps one generation engine resident: a grid runs the embedded
model and several checkpoints in one process, and every vLLM engine left open holds a worker
process and its whole KV cache."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from baselines import OnePolicy


class Backend:
    def __init__(self, model: str, events: list[str]):
        self.model, self.events = model, events

    def close(self) -> None:
        self.events.append(f"close {self.model}")


class Policy:
    def __init__(self, backend: Backend):
        self.backend = backend


def test_switching_models_closes_the_previous_engine_before_loading_the_next() -> None:
    events: list[str] = []

    def load(model: str) -> Policy:
        events.append(f"load {model}")
        return Policy(Backend(model, events))

    policy = OnePolicy(load)
    first = policy("embedded")
    assert policy("embedded") is first  # the cells of one model share one load
    second = policy("runs/sft/model")
    assert second.backend.model == "runs/sft/model"
    policy("embedded")
    policy.close()
    policy.close()  # nothing left to close
    assert events == [
        "load embedded",
        "close embedded",
        "load runs/sft/model",
        "close runs/sft/model",
        "load embedded",
        "close embedded",
    ]


def test_a_backend_without_close_is_released_by_reference() -> None:
    loads: list[str] = []
    policy = OnePolicy(lambda model: loads.append(model) or object())
    policy("a")
    policy("b")
    policy.close()
    assert loads == ["a", "b"] and policy.policy is None and policy.model is None
