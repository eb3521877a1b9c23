"""Every reward kind behind one factory, and one way to score a step's trajectories.

Outcome rewards score one trajectory at a time; Search-R2's hybrid reward scores a whole step
at once so its judge can batch or overlap the step's requests. `score_batch` takes either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from searchrl.config.train import RewardConfig
from searchrl.reward.hybrid import HybridReward
from searchrl.reward.judges import CachedJudge, make_judge
from searchrl.reward.outcome import RewardFn
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
        return make_outcome_reward(config)
    if config.process and judge is None:
        judge = make_judge(config)
    return HybridReward(judge if config.process else None, questions or {})


def score_batch(reward: RewardFn, trajectories: Sequence[Trajectory]) -> list[dict[str, float]]:
    """Breakdowns of `trajectories` in order: one call for a batch reward (it has
    `score_batch`), else one call per trajectory."""
    batch = getattr(reward, "score_batch", None)
    if callable(batch):
        return list(batch(trajectories))
    return [reward(t) for t in trajectories]
