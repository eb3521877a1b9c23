"""What the trainer is given from outside: a rollout function, a refine function and its place
among the training processes. Kept apart from `train.loop` so the sampling rounds
(`train.collect`) and the environments can name them without importing the trainer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import nn

from searchrl.refiner import RefineOutcome
from searchrl.types import Question, Trajectory


class RolloutFn(Protocol):
    """Questions → trajectories (`n_samples` each, grouped by question uid)."""

    def __call__(
        self, questions: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]: ...


class RefineFn(Protocol):
    """Finished trajectories → the Meta-Refiner's outcome (final trajectories and probes)."""

    def __call__(
        self, trajectories: Sequence[Trajectory], *, seed: int, greedy: bool, probe: bool = True
    ) -> RefineOutcome: ...


@dataclass
class Distributed:
    """This process's place among the training processes (1 of 1 without accelerate)."""

    rank: int = 0
    world_size: int = 1
    wrap: Callable[[nn.Module], nn.Module] = lambda module: module
    barrier: Callable[[], None] = lambda: None
    reduce: Callable[[int, str], int] = lambda value, op: value
    """All-reduce of one integer over the processes, op "sum" or "min"."""
    sharded: bool = False
    """FSDP: `wrap` shards in place; checkpoints and weight gathers involve every rank."""
