"""Joint optimization's meta rows inside their trajectory's normalisation (seed 001, "Joint
Optimization").

The paper treats the Actor's tokens and the Meta-Refiner's decision tokens as one augmented
trajectory: the 2-token decision is averaged together with the trajectory's own tokens
(1/L_i), and the batch has one sequence per trajectory. Here a decision has to be its own row
(its prompt is the meta prompt, not the question), so left alone every aggregation would count
it as a sequence of its own: under `seq-mean-token-mean` one decision would weigh as much as a
whole trajectory (~50–100× the paper's weight), and the meta rows would halve the trajectories'
share of the batch.

`RowLayout` fixes that for any aggregation without knowing which one it is: the loss weights
of a mini-batch are computed on a merged mask in which each meta row's tokens are appended to
its trajectory's row, so the aggregation sees exactly the paper's augmented trajectories, and
the weights are then split back onto the rows. Mini-batches keep each trajectory together
with its meta rows. Without meta rows the layout is the identity and changes nothing (same
mini-batches, same weights).

A meta row costs an update what its trajectory costs (its prompt holds the whole transcript)
for two trained tokens. `refiner.joint_share` < 1 trains a seeded share of them
(`choose_meta_rows`): the rows left out still count in their trajectory's normalisation (as
untrained tokens appended to the merged mask), and each trained one weighs m/k (m meta rows,
k trained), so every row's expected weight is exactly its weight with all m trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from searchrl.algo.losses import Weighting
from searchrl.refiner import meta_rows
from searchrl.train.update import minibatches
from searchrl.types import Trajectory


@dataclass(frozen=True)
class RowLayout:
    """Which trajectory each row of a step's experience belongs to."""

    owner: tuple[int, ...]
    """owner[r] = r for a trajectory row, the trajectory's row for a meta row."""

    untrained: tuple[int, ...] = ()
    """untrained[t]: decision tokens of trajectory t's meta rows left out of this update; they
    count in t's normalisation though no row carries them (empty: none left out)."""

    meta_scale: float = 1.0
    """The weight multiplier of a trained meta row: meta rows / trained meta rows."""

    @classmethod
    def of(cls, n_trajectories: int, parents: Sequence[int] = ()) -> RowLayout:
        """Trajectory rows 0..n−1, then one meta row per entry of `parents` (its trajectory)."""
        if any(not 0 <= p < n_trajectories for p in parents):
            raise ValueError("a meta row's parent must be one of the trajectory rows")
        return cls((*range(n_trajectories), *parents))

    @property
    def n_trajectories(self) -> int:
        """Rows that are trajectories (they come first)."""
        return sum(1 for r, o in enumerate(self.owner) if r == o)

    def minibatches(self, n_minibatches: int, generator: torch.Generator) -> list[list[int]]:
        """A seeded shuffle of the trajectories in near-equal parts, each trajectory followed
        by its meta rows (identical to `update.minibatches` without meta rows)."""
        extra: dict[int, list[int]] = {}
        for row, owner in enumerate(self.owner):
            if row != owner:
                extra.setdefault(owner, []).append(row)
        groups = minibatches(self.n_trajectories, n_minibatches, generator)
        return [[r for t in group for r in (t, *extra.get(t, []))] for group in groups]

    def weighting(self, weights: Weighting, mask: Tensor) -> Callable[[list[int]], Tensor]:
        """Rows of the experience → their per-token loss weights [len(rows), R], computed by
        `weights` on the merged mask (one row per trajectory, its meta rows' tokens
        appended). `mask` [N, R] is the experience's training mask."""

        def weigh(rows: list[int]) -> Tensor:
            sequences = list(dict.fromkeys(self.owner[r] for r in rows))
            left_out = [self.untrained[s] if self.untrained else 0 for s in sequences]
            if len(sequences) == len(rows) and not any(left_out):  # the plain aggregation
                return weights(mask[rows])
            seq_of = {owner: i for i, owner in enumerate(sequences)}
            slot: list[int] = []
            used = [0] * len(sequences)
            for r in rows:
                seq = seq_of[self.owner[r]]
                slot.append(used[seq])
                used[seq] += 1
            width, extra = mask.shape[1], max(left_out)
            merged = mask.new_zeros(len(sequences), max(used) * width + extra)  # [S, k·R + U]
            for r, j in zip(rows, slot, strict=True):
                merged[seq_of[self.owner[r]], j * width : (j + 1) * width] = mask[r]
            for seq, count in enumerate(left_out):  # the untrained decisions' tokens
                merged[seq, merged.shape[1] - extra : merged.shape[1] - extra + count] = 1
            split = weights(merged)  # [S, k·R + U]
            return torch.stack(
                [
                    split[seq_of[self.owner[r]], j * width : (j + 1) * width]
                    * (1.0 if r == self.owner[r] else self.meta_scale)
                    for r, j in zip(rows, slot, strict=True)
                ]
            )

        return weigh


def choose_meta_rows(
    n_trajectories: int,
    parents: Sequence[int],
    sizes: Sequence[int],
    share: float,
    generator: torch.Generator,
) -> tuple[list[int], RowLayout]:
    """The meta rows to train this step (indices into `parents`, sorted) and the layout of the
    trajectories followed by them: k = max(1, round(share · m)) of the m rows, drawn without
    replacement, each weighing m/k; the others' `sizes` (their decision tokens) stay in their
    trajectory's normalisation. share ≥ 1 keeps every row (the paper's joint optimization)."""
    m = len(parents)
    if m == 0 or share >= 1:
        return list(range(m)), RowLayout.of(n_trajectories, parents)
    k = max(1, round(share * m))
    kept = sorted(torch.randperm(m, generator=generator)[:k].tolist())
    untrained = [0] * n_trajectories
    for j in sorted(set(range(m)) - set(kept)):
        untrained[parents[j]] += sizes[j]
    layout = RowLayout.of(n_trajectories, [parents[j] for j in kept])
    return kept, RowLayout(layout.owner, tuple(untrained), m / k)


def joint_rows(
    trained: list[Trajectory], joint: bool, share: float, generator: torch.Generator
) -> tuple[list[Trajectory], list[int], RowLayout]:
    """A step's meta rows to train (none without `joint`), each one's trajectory index, and
    the layout of the trajectories followed by them."""
    rows, parents = meta_rows(trained) if joint else ([], [])
    sizes = [len(row.segments[-1].token_ids) for row in rows]
    kept, layout = choose_meta_rows(len(trained), parents, sizes, share, generator)
    return [rows[j] for j in kept], [parents[j] for j in kept], layout
