"""Which prompts a step trains on: the seeded prompt sampler and the group filters.

- `PromptSampler` walks epoch-wise seeded shuffles of the training questions and never puts
  one question twice into the same step (a batch straddling an epoch boundary used to draw a
  question again from the new shuffle, and its byte-identical samples merged into one doubled
  GRPO group). A question it has to pass over is deferred to the next draw, not lost.
- `split_groups` drops every group that contains a trajectory whose retrieval failed: an outage
  is not the policy's fault, and scoring those trajectories 0 would push down the very searches
  that were valid. The rest of the group goes too, because its baseline would be biased.
- With dynamic sampling (DAPO), a group whose rewards are all equal has zero advantage and
  gives no policy gradient, so it is not trained on; the trainer draws more prompts instead.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from searchrl.types import Question, Trajectory


@dataclass
class PromptSampler:
    """Epoch-wise seeded shuffles of the training questions. The state (epoch, position and
    the deferred indices) is small and checkpointed, so a resumed run draws exactly the prompts
    the uninterrupted one would have."""

    questions: Sequence[Question]
    seed: int
    epoch: int = 0
    position: int = 0
    deferred: list[int] = field(default_factory=list)
    weights: Sequence[float] = ()
    """Per question (empty = uniform): each pass is a weighted shuffle (Efraimidis-Spirakis:
    key u^(1/w), largest first), so a question of weight 2 tends to come before one of 1; every
    question is still drawn once per pass."""

    def _order(self) -> list[int]:
        order = list(range(len(self.questions)))
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        if not self.weights:
            rng.shuffle(order)
            return order
        keys = [rng.random() ** (1.0 / w) for w in self.weights]
        return sorted(order, key=lambda i: -keys[i])

    def next_batch(self, size: int, exclude: Iterable[str] = ()) -> list[Question]:
        """The next `size` distinct questions whose uid is not in `exclude` (the prompts this
        step already drew). A question met again before its batch is complete, or excluded,
        waits in `deferred` and is served first next time."""
        blocked = set(exclude)
        available = len({q.uid for q in self.questions} - blocked)
        if size > available:
            raise ValueError(
                f"a step needs {size} distinct prompts but only {available} are available"
            )
        picked: list[Question] = []
        waiting, self.deferred = self.deferred, []
        order = self._order()
        while len(picked) < size:
            if waiting:
                index = waiting.pop(0)
            else:
                if self.position >= len(order):
                    self.epoch, self.position = self.epoch + 1, 0
                    order = self._order()
                index = order[self.position]
                self.position += 1
            uid = self.questions[index].uid
            if uid in blocked:
                self.deferred.append(index)
            else:
                blocked.add(uid)
                picked.append(self.questions[index])
        self.deferred.extend(waiting)
        return picked

    def state(self) -> dict[str, object]:
        """What a checkpoint stores."""
        return {"epoch": self.epoch, "position": self.position, "deferred": list(self.deferred)}

    def load_state(self, state: dict[str, object] | Sequence[int]) -> None:
        """Inverse of `state` (older checkpoints stored only `(epoch, position)`)."""
        if isinstance(state, dict):
            self.epoch = int(state["epoch"])  # type: ignore[arg-type]
            self.position = int(state["position"])  # type: ignore[arg-type]
            self.deferred = [int(i) for i in state["deferred"]]  # type: ignore[union-attr]
        else:
            self.epoch, self.position = int(state[0]), int(state[1])
            self.deferred = []


def hop_weights(questions: Sequence[Question], by_hops: Sequence[float]) -> list[float]:
    """Each question's weight from its hop count (`data.train_hop_weights`; counts past the
    tuple take its last weight, unknown counts weigh 1); empty `by_hops` = uniform (`[]`)."""
    if not by_hops:
        return []
    return [1.0 if q.hops is None else by_hops[min(q.hops, len(by_hops)) - 1] for q in questions]


def groups_of(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories grouped by question uid, in first-seen order."""
    groups: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        groups.setdefault(traj.uid or traj.question, []).append(traj)
    return list(groups.values())


@dataclass
class GroupSplit:
    """One round of rollouts sorted by what the update can use."""

    informative: list[list[Trajectory]]
    """Groups whose rewards differ (a nonzero GRPO advantage somewhere), and single samples
    (REINFORCE: the raw score is the advantage)."""
    flat: list[list[Trajectory]]
    """Groups whose rewards are all equal (zero advantage everywhere)."""
    failed: list[list[Trajectory]]
    """Groups with at least one trajectory whose retrieval failed."""


def split_groups(trajectories: Sequence[Trajectory]) -> GroupSplit:
    """Sort scored trajectories into informative, flat and failed groups."""
    split = GroupSplit([], [], [])
    for group in groups_of(trajectories):
        if any(t.stats.failed is not None for t in group):
            split.failed.append(group)
        elif len(group) == 1 or len({t.reward["score"] for t in group}) > 1:
            split.informative.append(group)
        else:
            split.flat.append(group)
    return split
