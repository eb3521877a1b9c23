"""Outcome and format-aware rewards (Search-R1 v0.3 table), on the response only."""

from __future__ import annotations

import pytest

from searchrl.config.train import RewardConfig
from searchrl.data.templates import INVALID_ACTION_FEEDBACK
from searchrl.reward.format import is_valid_sequence
from searchrl.reward.outcome import em_reward, f1_reward, make_reward
from searchrl.types import Trajectory

GOOD = (
    "<think> need info </think>\n<search> paris river </search>"
    '\n\n<information>Doc 1(Title: "Seine") The Seine flows through Paris.</information>\n\n'
    "<think> it is the Seine </think>\n<answer> Seine </answer><|im_end|>"
)


def _traj(response: str, gold: str = "Seine") -> Trajectory:
    traj = Trajectory(id="q", question="?", golden_answers=[gold])
    traj.append("policy", response, [1])
    return traj


@pytest.mark.parametrize(
    ("response", "valid"),
    [
        (GOOD, True),
        ("<think> x </think><answer> y </answer>", True),
        ("<think> x </think><answer> y </answer></s>", True),
        ("<answer> y </answer>", False),
        ("<think> x </think> chatter <answer> y </answer>", False),
        ("<think> x </think><search> q </search><answer> y </answer>", False),
        ("<think> x </think><answer> y </answer> more", False),
        ("<think> x </think>", False),
    ],
)
def test_is_valid_sequence(response: str, valid: bool) -> None:
    assert is_valid_sequence(response) is valid


def test_format_reward_table() -> None:
    reward = make_reward(RewardConfig(kind="format"))
    assert reward(_traj(GOOD))["score"] == 1.0
    assert reward(_traj("<answer> Seine </answer>"))["score"] == pytest.approx(0.8)
    assert reward(_traj(GOOD.replace("> Seine <", "> Rhine <")))["score"] == pytest.approx(0.2)
    assert reward(_traj("<answer> Rhine </answer>"))["score"] == pytest.approx(0.1)
    assert reward(_traj("no answer at all"))["score"] == 0.0
    bonus = make_reward(RewardConfig(kind="format", retrieval_score=0.1))
    assert bonus(_traj(GOOD.replace("> Seine <", "> Rhine <")))["score"] == pytest.approx(0.3)


def test_em_and_f1() -> None:
    assert em_reward(_traj("<answer> the Seine </answer>"))["score"] == 1.0
    assert em_reward(_traj("<answer> Seine river </answer>"))["score"] == 0.0
    assert f1_reward(_traj("<answer> Seine river </answer>"))["score"] == pytest.approx(2 / 3)


def test_invalid_action_feedback_is_never_read_as_an_answer() -> None:
    """The env feedback contains "<answer> and </answer>"; a trajectory that never answered
    must score as unanswered, not as the answer "and"."""
    traj = Trajectory(id="q", question="?", golden_answers=["and"])
    traj.append("policy", "<think> hmm </think>", [1])
    traj.append("env", INVALID_ACTION_FEEDBACK, [2])
    assert em_reward(traj)["em"] == 0.0


def test_an_answer_split_across_policy_segments_is_not_an_answer() -> None:
    traj = Trajectory(id="q", question="?", golden_answers=["Paris"])
    traj.append("policy", "<answer> Par", [1])
    traj.append("env", INVALID_ACTION_FEEDBACK, [2])
    traj.append("policy", "is </answer>", [3])
    assert em_reward(traj)["em"] == 0.0
    traj.append("env", INVALID_ACTION_FEEDBACK, [2])
    traj.append("policy", "<answer> Paris </answer>", [4])
    assert em_reward(traj)["em"] == 1.0
