"""`reward.no_answer_score`: a trajectory that ends without an answer scores below a wrong
answer, for outcome rewards and the batched hybrid one, and the format reward keeps its table."""

from __future__ import annotations

import pytest

from searchrl.config.train import RewardConfig
from searchrl.reward.scoring import NoAnswerScore, make_reward, score_batch
from searchrl.types import Trajectory


def trajectory(response: str, answer: str | None) -> Trajectory:
    t = Trajectory(id="q#0", question="Capital?", golden_answers=["Paris"], uid="q")
    t.append("policy", response, [1, 2])
    t.answer = answer
    return t


RIGHT = trajectory("<think> a </think><answer> Paris </answer>", "Paris")
WRONG = trajectory("<think> a </think><answer> Lyon </answer>", "Lyon")
NONE = trajectory("<think> a </think><search> more </search>", None)


@pytest.mark.parametrize("kind", ["em", "f1", "hybrid"])
def test_unanswered_scores_below_wrong(kind: str) -> None:
    config = RewardConfig(kind=kind, no_answer_score=-0.5, process=False)
    reward = make_reward(config)
    assert isinstance(reward, NoAnswerScore)
    scores = [b["score"] for b in score_batch(reward, [RIGHT, WRONG, NONE])]
    assert scores == [1.0, 0.0, -0.5]
    assert [b["no_answer"] for b in score_batch(reward, [RIGHT, NONE])] == [0.0, 1.0]


def test_default_keeps_the_paper_reward() -> None:
    reward = make_reward(RewardConfig(kind="em"))
    assert not isinstance(reward, NoAnswerScore)
    assert reward(NONE)["score"] == 0.0


def test_answer_written_in_a_policy_segment_counts_as_answered() -> None:
    """The reward's own answer extraction decides, not only the rollout's parsed field."""
    late = trajectory("<think> a </think><answer> Paris </answer>", None)
    reward = make_reward(RewardConfig(kind="em", no_answer_score=-1.0))
    assert reward(late)["score"] == 1.0


def test_format_reward_is_never_wrapped() -> None:
    reward = make_reward(RewardConfig(kind="format", no_answer_score=-1.0))
    assert not isinstance(reward, NoAnswerScore)
    assert reward(NONE)["score"] == 0.0
