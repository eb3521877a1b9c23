"""Every reward kind behind one factory, and one way to score a step's trajectories.

Outcome rewards score one trajectory at a time; Search-R2's hybrid reward scores a whole step
at once so its judge can batch or overlap the step's requests. `score_batch` takes either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from searchrl.config.train import RewardConfig
from searchrl.reward.hybrid import HybridReward
from searchrl.reward.judges import CachedJudge, make_judge
from searchrl.reward.outcome import RewardFn, final_answer
from searchrl.reward.outcome import make_reward as make_outcome_reward
from searchrl.types import Question, Trajectory


def make_reward(
    config: RewardConfig,
    questions: Mapping[str, Question] | None = None,
    judge: CachedJudge | None = None,
) -> RewardFn:
    """The reward `config.kind` names. For `hybrid` with `process` on, `judge` defaults to
    `make_judge(config)` (pass one for `judge: local`, which needs a generation backend);
    `questions` (uid → Question) give world questions' supporting passages to the judges."""
    if config.kind != "hybrid":
        reward: RewardFn = make_outcome_reward(config)
    else:
        if config.process and judge is None:
            judge = make_judge(config)
        reward = HybridReward(judge if config.process else None, questions or {})
    if config.no_answer_score != 0.0 and config.kind != "format":
        return NoAnswerScore(reward, config.no_answer_score)
    return reward


class NoAnswerScore:
    """Wraps a reward so a trajectory that ends without an answer scores `score` (logged as
    `no_answer`), instead of the 0 a wrong answer gets. The format reward has its own table
    for unanswered trajectories and is never wrapped."""

    def __init__(self, reward: RewardFn, score: float) -> None:
        self.reward = reward
        self.score = score

    def _apply(self, trajectory: Trajectory, breakdown: dict[str, float]) -> dict[str, float]:
        unanswered = final_answer(trajectory) is None
        out = {**breakdown, "no_answer": float(unanswered)}
        if unanswered:
            out["score"] = self.score
        return out

    def __call__(self, trajectory: Trajectory) -> dict[str, float]:
        return self._apply(trajectory, self.reward(trajectory))

    def score_batch(self, trajectories: Sequence[Trajectory]) -> list[dict[str, float]]:
        """Keeps the wrapped reward's batching (Search-R2's judge sees the whole round)."""
        inner = score_batch(self.reward, trajectories)
        return [self._apply(t, b) for t, b in zip(trajectories, inner, strict=True)]


def score_batch(reward: RewardFn, trajectories: Sequence[Trajectory]) -> list[dict[str, float]]:
    """Breakdowns of `trajectories` in order: one call for a batch reward (it has
    `score_batch`), else one call per trajectory."""
    batch = getattr(reward, "score_batch", None)
    if callable(batch):
        return list(batch(trajectories))
    return [reward(t) for t in trajectories]
