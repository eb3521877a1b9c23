"""`benchmarks/learning.py --summarize` pairs two evaluations of the same questions; run while
one of them is still writing, it must not report a gain on the questions answered so far."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from learning_summary import _pairs, paired_gain


def _write_eval(folder: Path, ems: list[float], finished: bool) -> None:
    folder.mkdir(parents=True)
    rows = [{"id": f"q{i}", "em": em} for i, em in enumerate(ems)]
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        (folder / "summary.json").write_text(json.dumps({"overall": {"em": {"mean": 0.0}}}))


def test_an_evaluation_still_writing_is_not_paired(tmp_path: Path) -> None:
    _write_eval(tmp_path / "eval_sft", [0.0, 1.0, 0.0, 1.0], finished=True)
    _write_eval(tmp_path / "eval_recipe", [1.0, 1.0], finished=False)  # 2 of 4 written
    assert paired_gain(tmp_path, "eval_recipe", "eval_sft", seed=0) is None


def test_finished_evaluations_are_paired_question_by_question(tmp_path: Path) -> None:
    _write_eval(tmp_path / "eval_sft", [0.0, 1.0, 0.0, 1.0], finished=True)
    _write_eval(tmp_path / "eval_recipe", [1.0, 1.0, 0.0, 0.0], finished=True)
    gain = paired_gain(tmp_path, "eval_recipe", "eval_sft", seed=0)
    assert gain is not None
    assert gain.diff == 0.0
    assert (gain.wins, gain.losses) == (1, 1)


def test_lever_arms_are_paired_against_the_recipe_only_when_it_ran() -> None:
    with_recipe = {(name, base) for _, name, base in _pairs(["recipe", "old", "weak"])}
    assert ("eval_old", "eval_recipe") in with_recipe
    assert ("eval_old", "eval_sft") in with_recipe
    assert ("eval_weak", "eval_recipe") not in with_recipe  # another warm start: not a lever
    without = {(name, base) for _, name, base in _pairs(["old", "ppo"])}
    assert not any(base == "eval_recipe" for _, base in without)
