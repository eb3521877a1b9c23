"""Generation overlapped with training: while the trainer updates on step t, a background
thread already rolls out step t+1 (up to `max_staleness` steps ahead) with the weights the
engine holds, and the trainer's truncated importance sampling corrects for the lag.

Timeline with `max_staleness = 1` (w_k = the weights after k updates):

    step 0   roll out P0 with w0 (nothing planned yet) ─► start P1 with w0 ─► update → w1
    step 1   take P1 (sampled by w0), sync w1          ─► start P2 with w1 ─► update → w2
    step 2   take P2 (sampled by w1), sync w2          ─► …

Step t+1's prompts are known as soon as step t has drawn its own: the prompt sampler is
seeded and its state is small, so a copy of it draws exactly what the trainer will draw
next (`Trainer.collected` fires after the last sampling round of a step, so extra dynamic
sampling rounds are already accounted for). A rollout is handed over only when the trainer
asks for exactly the planned questions, sample count and seed; anything else (held-out
evaluation, a later sampling round, a plan overtaken by an extra round) runs at once with
the current weights. Weights reach the engine only between rollouts: one lock serializes
every use of the engine, and each rollout first syncs the weights version it was planned
with (a copy of the weights is kept for versions the engine does not hold yet).

On a 2-core machine the natural layout is vLLM's worker on one core (its `auto` binding
keeps the other for its scheduler) and the trainer on the other (`policy.torch_threads=1`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from searchrl.config.errors import ConfigError
from searchrl.config.train import TrainConfig
from searchrl.models.generation import (
    Generation,
    GenerationBackend,
    SamplingParams,
    WeightSyncable,
)
from searchrl.train.collect import rollout_seed
from searchrl.train.loop import Trainer
from searchrl.train.models import merged_for_export
from searchrl.train.ports import RolloutFn
from searchrl.train.sampling import PromptSampler
from searchrl.types import Question, Trajectory

Key = tuple[tuple[str, ...], int, int]
"""(question uids, samples per question, seed): what identifies one rollout call."""


class SharedEngine:
    """The generation backend shared by the trainer's thread and the rollout-ahead thread.
    Every call holds one re-entrant lock (a whole rollout holds it across its turns), and
    weights are synced by version, so a version the engine holds is never sent twice."""

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.lock = threading.RLock()
        self.version: int | None = None
        self.sync_s = 0.0
        """Seconds spent syncing weights since the last `take_sync_seconds`."""

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        with self.lock:
            return self.backend.generate(prompts, params)

    def submit(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list:
        """A streaming engine's `submit` (`rollout.streaming`), under the lock."""
        with self.lock:
            return self.backend.submit(prompts, params)  # type: ignore[attr-defined]

    def collect(self) -> list[tuple[Any, Generation]]:
        """A streaming engine's `collect`, under the lock."""
        with self.lock:
            return self.backend.collect()  # type: ignore[attr-defined]

    def score(
        self, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]]
    ) -> list[list[float]]:
        """The engine's `score` (the Meta-Refiner's reading), under the lock."""
        with self.lock:
            return self.backend.score(prompts, candidates)  # type: ignore[attr-defined]

    def sync_to(self, weights: Any, version: int) -> None:
        """Load `weights` (a module or a `WeightSnapshot`: no module, so the engine reads no
        fingerprint from it and always loads) unless the engine holds `version` (the
        trainer's step count)."""
        with self.lock:
            if self.version == version:
                return
            assert isinstance(self.backend, WeightSyncable)
            started = time.perf_counter()
            self.backend.sync_weights(weights)
            self.sync_s += time.perf_counter() - started
            self.version = version

    def take_sync_seconds(self) -> float:
        seconds, self.sync_s = self.sync_s, 0.0
        return seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


@dataclass
class WeightSnapshot:
    """A copy of the policy's weights at one version, for a rollout that starts later (what a
    backend's `sync_weights` reads: `state_dict()` and the transformers `config`)."""

    config: Any
    tensors: dict[str, torch.Tensor]

    @classmethod
    def of(cls, module: nn.Module) -> WeightSnapshot:
        with torch.no_grad():
            tensors = {k: v.detach().clone() for k, v in module.state_dict().items()}
        return cls(getattr(module, "config", None), tensors)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.tensors


@dataclass
class _Planned:
    step: int
    key: Key
    version: int
    future: Future[tuple[list[Trajectory], int]]


_NO_STATS = {"staleness": 0.0, "wait_s": 0.0, "ahead": 0.0}
"""`overlap/*` metrics of a step whose rollout was not planned ahead: `ahead` is 1 when it
was, `staleness` the updates between its sampling weights and the trained policy, `wait_s`
how long the trainer still waited for it."""


class OverlappedRollout:
    """The trainer's `RolloutFn` with rollouts planned ahead; install with `attach`."""

    def __init__(
        self,
        trainer: Trainer,
        engine: SharedEngine,
        rollout: RolloutFn,
        policy: nn.Module,
        n_samples: int,
    ) -> None:
        self.trainer = trainer
        self.engine = engine
        self.rollout = rollout
        """Rolls out without touching the weights (`make_rollout_fn(..., sync=False)`)."""
        self.policy = policy
        self.n_samples = n_samples
        self.max_staleness = trainer.config.overlap.max_staleness
        self._by_uid = {q.uid: q for q in trainer.sampler.questions}
        self._planned: deque[_Planned] = deque()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-ahead")
        self._stats = dict(_NO_STATS)

    def __call__(
        self, questions: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]:
        key = _key(questions, n_samples, seed)
        planned = None if greedy else self._take(key)
        if planned is None:
            with self.engine.lock:
                self.engine.sync_to(self.policy_weights(), self.trainer.step_count)
                return self.rollout(questions, n_samples=n_samples, seed=seed, greedy=greedy)
        started = time.perf_counter()
        trajectories, version = planned.future.result()
        self._stats = {
            "staleness": float(self.trainer.step_count - version),
            "wait_s": time.perf_counter() - started,
            "ahead": 1.0,
        }
        if self.max_staleness == 1:  # the engine is idle: give it the current weights now
            self.engine.sync_to(self.policy_weights(), self.trainer.step_count)
        return trajectories

    def policy_weights(self) -> nn.Module:
        """The current policy as a plain module (LoRA merged into a copy)."""
        return merged_for_export(self.policy)

    def plan(self) -> None:
        """`Trainer.collected`: start rolling out the next `max_staleness` steps (those not
        planned yet), each with the weights of the current version."""
        trainer, config = self.trainer, self.trainer.config
        keep: deque[_Planned] = deque()
        wanted = self._predict()
        for planned in self._planned:
            if wanted.get(planned.step) == planned.key:
                keep.append(planned)
            else:
                planned.future.cancel()
        self._planned = keep
        have = {p.step for p in keep}
        version = trainer.step_count
        snapshot: Any = None
        for step, key in sorted(wanted.items()):
            if step in have or step >= config.steps:
                continue
            if snapshot is None and self.engine.version != version:
                snapshot = WeightSnapshot.of(self.policy_weights())
            future = self._worker.submit(self._run, key, version, snapshot)
            self._planned.append(_Planned(step, key, version, future))

    def metrics(self) -> dict[str, float]:
        """The last step's overlap measurements, then zeroed."""
        stats = {f"overlap/{k}": v for k, v in self._stats.items()}
        stats["timing_s/weight_sync"] = self.engine.take_sync_seconds()
        self._stats = dict(_NO_STATS)
        return stats

    def close(self) -> None:
        """Cancel what has not started, wait for what has."""
        for planned in self._planned:
            planned.future.cancel()
        self._worker.shutdown(wait=True)

    def _run(
        self, key: Key, version: int, snapshot: WeightSnapshot | None
    ) -> tuple[list[Trajectory], int]:
        """One planned rollout on the worker thread; returns it with the weights version it
        was sampled with (newer than planned when an evaluation synced the engine first)."""
        uids, n_samples, seed = key
        questions = [self._by_uid[uid] for uid in uids]
        with self.engine.lock:
            if snapshot is not None:
                self.engine.sync_to(snapshot, version)
            used = self.engine.version if self.engine.version is not None else version
            trajectories = self.rollout(questions, n_samples=n_samples, seed=seed, greedy=False)
            return trajectories, used

    def _take(self, key: Key) -> _Planned | None:
        """The planned rollout for `key`, dropping plans that came before it; None (and the
        plans kept) when nothing planned matches."""
        if all(p.key != key for p in self._planned):
            return None
        while True:
            planned = self._planned.popleft()
            if planned.key == key:
                return planned
            planned.future.cancel()

    def _predict(self) -> dict[int, Key]:
        """Round 0 of each of the next `max_staleness` steps, drawn from a copy of the
        trainer's prompt sampler exactly as `train.collect.Collector` will draw it."""
        trainer, config = self.trainer, self.trainer.config
        dist = trainer.dist
        sampler = PromptSampler(trainer.sampler.questions, trainer.sampler.seed)
        sampler.load_state(trainer.sampler.state())
        size = min(config.batch_size, len(sampler.questions))
        wanted: dict[int, Key] = {}
        for ahead in range(1, self.max_staleness + 1):
            step = trainer.step_count + ahead
            prompts = sampler.next_batch(size)
            seed = rollout_seed(config.seed, step, 0, dist.world_size) + dist.rank
            mine = prompts[dist.rank :: dist.world_size]
            wanted[step] = _key(mine, self.n_samples, seed)
        return wanted


def _key(questions: Sequence[Question], n_samples: int, seed: int) -> Key:
    return tuple(q.uid for q in questions), n_samples, seed


def check_overlap(config: TrainConfig, backend: GenerationBackend) -> None:
    """Overlap needs the importance correction, an engine that holds its own copy of the
    weights (generating with the module being updated would race the optimizer), and, with
    the Meta-Refiner, one step of staleness (it generates between rollouts and must see the
    current weights)."""
    if config.algo.behaviour_correction == "off":
        raise ConfigError(
            "overlap.enabled: the lagging samples need algo.behaviour_correction=auto or tis"
        )
    if not (isinstance(backend, WeightSyncable) and backend.owns_weights):
        raise ConfigError(
            "overlap.enabled: the HF backend generates with the policy module itself here; "
            "use model.backend=vllm, or a generation copy (model.generation_dtype)"
        )
    if config.refiner.enabled and config.overlap.max_staleness > 1:
        raise ConfigError("overlap.max_staleness: the Meta-Refiner supports 1 only")


def attach(
    trainer: Trainer, engine: SharedEngine, rollout: RolloutFn, policy: nn.Module
) -> OverlappedRollout:
    """Give `trainer` a rollout function that plans ahead; returns it (for `metrics` and
    `close`). `rollout` runs over `engine` and never syncs weights itself."""
    check_overlap(trainer.config, engine.backend)
    overlapped = OverlappedRollout(trainer, engine, rollout, policy, trainer.config.n_samples)
    trainer.rollout = trainer.collector.rollout = overlapped
    trainer.collected = overlapped.plan
    return overlapped
