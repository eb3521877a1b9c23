"""Outcome rewards for finished trajectories: EM (the paper), F1, and v0.3's format-aware EM.

A reward function maps a trajectory to a breakdown whose `score` is the training signal; the
other keys (em, f1, format_valid) are logged. EM and F1 come from `reward.metrics`, the same
code evaluation uses, so the training reward and the reported metric cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable

from searchrl.config.train import RewardConfig
from searchrl.reward.format import format_reward, is_valid_sequence, retrieved_gold
from searchrl.reward.metrics import answer_metrics, extract_answer
from searchrl.types import Trajectory

RewardFn = Callable[[Trajectory], dict[str, float]]


def final_answer(trajectory: Trajectory) -> str | None:
    """The rollout's parsed answer, or else the last complete `<answer>` block inside a single
    policy segment. Never text joined across segments (`<answer> Par` … feedback … `is
    </answer>` is not an answer), and never env text (the invalid-action feedback itself says
    "<answer> and </answer>")."""
    if trajectory.answer is not None:
        return trajectory.answer
    found = [extract_answer(s.text) for s in trajectory.segments if s.role == "policy"]
    return next((a for a in reversed(found) if a is not None), None)


def _breakdown(trajectory: Trajectory) -> tuple[str | None, dict[str, float]]:
    answer = final_answer(trajectory)
    metrics = answer_metrics(answer, trajectory.golden_answers)
    metrics["format_valid"] = float(is_valid_sequence(trajectory.response_text))
    return answer, metrics


def em_reward(trajectory: Trajectory) -> dict[str, float]:
    """1 if the answer exactly matches a gold answer after normalization, else 0."""
    _, metrics = _breakdown(trajectory)
    return {"score": metrics["em"], **metrics}


def f1_reward(trajectory: Trajectory) -> dict[str, float]:
    """Token F1 of the answer against the best gold answer (partial credit)."""
    _, metrics = _breakdown(trajectory)
    return {"score": metrics["f1"], **metrics}


def make_format_reward(config: RewardConfig) -> RewardFn:
    """Search-R1 v0.3 format-aware EM with the config's λs."""

    def reward(trajectory: Trajectory) -> dict[str, float]:
        answer, metrics = _breakdown(trajectory)
        correct = None if answer is None else bool(metrics["em"])
        score = format_reward(
            correct,
            bool(metrics["format_valid"]),
            retrieved_gold(trajectory.response_text, trajectory.golden_answers),
            structure_format_score=config.structure_format_score,
            final_format_score=config.final_format_score,
            retrieval_score=config.retrieval_score,
        )
        return {"score": score, **metrics}

    return reward


def make_reward(config: RewardConfig) -> RewardFn:
    """Pick an outcome reward function once, from the config (`hybrid` needs a judge and the
    questions: `reward.scoring.make_reward` builds every kind)."""
    if config.kind == "em":
        return em_reward
    if config.kind == "f1":
        return f1_reward
    if config.kind == "format":
        return make_format_reward(config)
    raise ValueError(f"{config.kind!r} is not an outcome reward; use reward.scoring.make_reward")
