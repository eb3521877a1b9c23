"""`benchmarks/training/run_diff.py`: where two runs of one training command part ways, read off the
trajectories each step kept."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "training"))

from run_diff import compare, table
from searchrl.rollout.io import write_trajectories
from searchrl.types import MetaDecision, Refinement, Segment, Trajectory


def _row(
    sample: int, tokens: list[int], logprobs: list[float], prompt: str, odds: float
) -> Trajectory:
    """One question's sample: an env segment, then the policy's tokens, read by the refiner
    with `prompt`."""
    decision = MetaDecision(prompt=prompt, prompt_ids=[1, 2], decision=Segment("meta", "0", [48]),
                            cut_step=0, steps=1, log_odds=odds)  # fmt: skip
    refinement = Refinement(False, 0, 2, log_odds=odds, decisions=[decision])
    segments = [Segment("env", "doc", [7, 8]), Segment("policy", "x", tokens, logprobs)]
    return Trajectory(id=f"q#{sample}", question="q", golden_answers=["a"], segments=segments,
                      sample=sample, refinement=refinement)  # fmt: skip


def _pair() -> tuple[list[Trajectory], list[Trajectory]]:
    """Run b repeats run a except: sample 1 has one log-probability moved (same tokens), sample 2
    sampled another last token (so another meta prompt), sample 3 was scored differently from
    the same prompt."""
    a = [_row(0, [1, 2, 3], [-0.1, -0.2, -0.3], "p0", 0.5),
         _row(1, [1, 2, 3], [-0.1, -0.2, -0.3], "p1", 0.5),
         _row(2, [1, 2, 3], [-0.1, -0.2, -0.3], "p2", 0.5),
         _row(3, [4, 5], [-0.4, -0.5], "p3", 0.5)]  # fmt: skip
    b = [_row(0, [1, 2, 3], [-0.1, -0.2, -0.3], "p0", 0.5),
         _row(1, [1, 2, 3], [-0.1, -0.25, -0.3], "p1", 0.5),
         _row(2, [1, 2, 9], [-0.1, -0.2, -2.0], "p2'", 0.9),
         _row(3, [4, 5], [-0.4, -0.5], "p3", -0.2)]  # fmt: skip
    return a, b


def test_two_runs_are_compared_row_by_row_where_their_samples_match() -> None:
    a, b = _pair()
    diff = compare(a, list(reversed(b)))  # matched by question and sample, not by order
    assert (diff.rows, diff.same_tokens, diff.same_prompts, diff.rescored) == (4, 3, 3, 1)
    assert diff.tokens == 3 + 3 + 2  # sample 2's policy segment differs: not compared
    assert diff.moved == 1 and diff.max_delta == pytest.approx(0.05)
    assert diff.first == (1, 1, "q#1")


def test_identical_runs_show_no_difference() -> None:
    a, _ = _pair()
    diff = compare(a, [Trajectory.from_json(t.to_json()) for t in a])
    assert (diff.same_tokens, diff.same_prompts, diff.rescored, diff.moved) == (4, 4, 0, 0)
    assert diff.first is None


def test_the_table_has_a_row_per_step_both_runs_reached(tmp_path: Path) -> None:
    a, b = _pair()
    for run, rows, last in ((tmp_path / "a", a, 3), (tmp_path / "b", b, 2)):
        for step in range(1, last + 1):
            write_trajectories(run / "trajectories" / f"step_{step}.jsonl", rows)
    for name in ("eval_step_0.jsonl", "step_old.jsonl"):  # neither is a training step
        (tmp_path / "a" / "trajectories" / name).write_text("")
    assert table(tmp_path / "a", tmp_path / "b").row_count == 2
    with pytest.raises(SystemExit, match="share no step"):
        table(tmp_path / "a", tmp_path)
