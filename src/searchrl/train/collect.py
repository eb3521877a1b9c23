"""A step's sampling rounds: roll out prompts (and refine them, for Search-R2), score them, and
keep the groups the update can use, round after round, until `batch_size` usable groups exist.

Groups with a failed retrieval are never trained on. Without dynamic sampling one round is
drawn and every other group is trained on (the paper). With it (DAPO), groups whose rewards are
all equal are skipped, later rounds draw enough new prompts to replace them (sized by the
informative share seen so far), and exactly `batch_size` groups are kept, so every optimizer
step averages over the same number of useful groups. Under `accelerate launch` each process
rolls out its slice of the prompts; the counts are reduced over the processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from searchrl.config.train import TrainConfig
from searchrl.refiner import RefineOutcome, refiner_metrics
from searchrl.train.metrics import StageTimer
from searchrl.train.models import evaluating
from searchrl.train.sampling import PromptSampler, split_groups
from searchrl.types import Trajectory

if TYPE_CHECKING:
    from torch import nn

    from searchrl.train.ports import Distributed, RefineFn, RolloutFn


class Collected(NamedTuple):
    """One step's rollouts: everything sampled, what is trained on, and the counters."""

    sampled: list[Trajectory]
    trained: list[Trajectory]
    counts: dict[str, float]


def rollout_seed(seed: int, step: int, rounds: int, world_size: int) -> int:
    """The seed of one sampling round of one step; each process adds its rank (the overlap
    planner derives the next step's seed with it)."""
    return ((seed * 100_003 + step) * 8 + rounds) * world_size


def engine_seed(seed: int, rank: int, world_size: int) -> int:
    """The stream a process's generation engine starts from: the run's `seed` alone in one
    process, distinct per rank under DDP/FSDP. vLLM on a CPU takes no per-request seed, so
    ranks whose engines started from one seed drew alike wherever their prompts matched."""
    return seed * world_size + rank


@dataclass
class Collector:
    """Draws prompts from `sampler`, rolls them out with `rollout` (and `refine`), scores them
    with `score` (one call per round, so a batch reward judges the whole round)."""

    config: TrainConfig
    sampler: PromptSampler
    rollout: RolloutFn
    score: Callable[[Sequence[Trajectory]], None]
    dist: Distributed
    policy: nn.Module
    refine: RefineFn | None = None

    def collect(self, step: int, timer: StageTimer) -> Collected:
        """The sampling rounds of optimizer step `step` (seeds derive from it)."""
        cfg, dist, algo = self.config, self.dist, self.config.algo
        quota = -(-cfg.batch_size // dist.world_size)  # groups this process may keep
        sampled: list[Trajectory] = []
        kept: list[list[Trajectory]] = []
        outcomes: list[RefineOutcome] = []
        used: set[str] = set()
        drawn = informative = failed = rounds = 0
        while rounds < (algo.max_sampling_rounds if algo.dynamic_sampling else 1):
            missing = cfg.batch_size - dist.reduce(len(kept), "sum")
            if missing <= 0:
                break
            share = informative / drawn if drawn else 1.0
            size = cfg.batch_size if rounds == 0 else -(-missing // max(share, 0.25))
            size = min(size, 2 * cfg.batch_size, len(self.sampler.questions) - len(used))
            if size <= 0:
                break
            prompts = self.sampler.next_batch(size, exclude=used)
            used.update(q.uid for q in prompts)
            seed = rollout_seed(cfg.seed, step, rounds, dist.world_size)
            with timer("gen"), evaluating(self.policy):
                trajectories = self.rollout(
                    prompts[dist.rank :: dist.world_size],
                    n_samples=cfg.n_samples,
                    seed=seed + dist.rank,
                    greedy=False,
                )
            if self.refine is not None:
                with timer("refine"), evaluating(self.policy):
                    outcomes.append(
                        self.refine(
                            trajectories, seed=seed + dist.rank, greedy=False, probe=rounds == 0
                        )
                    )
                trajectories = outcomes[-1].final
            with timer("reward"):
                self.score(trajectories)
                for outcome in outcomes[-1:] if self.refine is not None else []:
                    self.score(outcome.unscored())
            split = split_groups(trajectories)
            sampled += trajectories
            drawn += len(prompts)
            informative += dist.reduce(len(split.informative), "sum")
            failed += sum(len(g) for g in split.failed)
            kept += split.informative if algo.dynamic_sampling else split.informative + split.flat
            rounds += 1
        kept = kept[: min(quota, dist.reduce(len(kept), "min"))]
        counts = {
            "train/groups_sampled": float(drawn),
            "train/groups_informative": float(informative),
            "train/groups_trained": float(len(kept) * dist.world_size),
            "train/sampling_rounds": float(rounds),
            "train/dropped_failed": float(failed),
        }
        if self.refine is not None:
            counts.update(refiner_metrics(outcomes))
        return Collected(sampled, [t for group in kept for t in group], counts)
