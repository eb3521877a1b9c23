"""`benchmarks/search_r2/refiner_tau.py`: refinement at every τ above a run's own, read off an
evaluation's per-question records or a training run's sampled trajectories, and the Actor's
confidence on the same trajectories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from refiner_tau import confidence_row, rows_for
from searchrl.rollout.io import write_trajectories
from searchrl.types import Refinement, Segment, Trajectory


def _run(
    folder: Path, margin: float, odds: list[float], actor: list[float], em: list[float]
) -> Path:
    folder.mkdir()
    (folder / "run.json").write_text(
        json.dumps({"method": "search-r2", "refiner": {"margin": margin}})
    )
    rows = [{"actor_em": a, "em": e, "revised": o > margin,
             "trajectory": {"refinement": {"log_odds": o, "revised": o > margin}}}
            for o, a, e in zip(odds, actor, em, strict=True)]  # fmt: skip
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_higher_tau_keeps_the_actor_answer_where_it_no_longer_revises(tmp_path: Path) -> None:
    # question 0 is kept at τ = 0; 1 is fixed, 2 broken, 3 stays wrong
    run = _run(tmp_path / "eval", 0.0, [-1.0, 0.3, 0.6, 1.2], [1, 0, 1, 0], [1, 1, 0, 0])
    rows = {row[4]: row for row in rows_for(run, (0.0, 0.5, 2.0))}
    # columns: run, n, ROC-AUC, Actor EM, τ, revised, EM, gain, A_prec, wrong→right, right→wrong
    assert rows["0"][2] == "0.750" and rows["0"][3] == "0.500"  # 3 of 4 pairs ranked right
    assert rows["0"][5:7] == ["0.75", "0.500"] and rows["0"][8:] == ["+0.000", "1", "1"]
    assert rows["0.5"][5:7] == ["0.50", "0.250"] and rows["0.5"][8:] == ["-0.500", "0", "1"]
    assert rows["2"][5:7] == ["0.00", "0.500"] and rows["2"][7].startswith("+0.000")
    assert rows["2"][8] == "–"


def test_a_training_run_is_read_from_the_trajectories_its_steps_sampled(tmp_path: Path) -> None:
    run = tmp_path / "full"
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text("refiner:\n  margin: 0.0\n")
    for step, (odds, before, after) in enumerate([(0.4, 0.0, 1.0), (-0.2, 1.0, 1.0)], start=1):
        refinement = {"log_odds": odds, "revised": odds > 0, "original_em": before}
        row = {"metrics": {"em": after}, "refinement": refinement}
        (run / "trajectories" / f"step_{step}.jsonl").write_text(json.dumps(row) + "\n")
    (row,) = rows_for(run, (0.0,))
    assert row[1] == "2" and row[3] == "0.500" and row[5:7] == ["0.50", "1.000"]
    assert row[8:] == ["+1.000", "1", "0"]


def test_thresholds_below_the_runs_own_cannot_be_read(tmp_path: Path) -> None:
    run = _run(tmp_path / "eval", 0.5, [0.3, 0.6], [1, 0], [1, 1])
    assert [row[4] for row in rows_for(run, (0.0, 0.25, 0.5, 1.0))] == ["0.5", "1"]


def test_a_run_whose_revisions_do_not_follow_its_threshold_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "eval", 0.0, [0.3, 0.6], [1, 0], [1, 1])
    (run / "run.json").write_text(json.dumps({"method": "search-r2", "refiner": {"margin": 0.5}}))
    with pytest.raises(SystemExit, match="do not follow"):
        rows_for(run, (0.5,))


def _sampled(em: float, logprobs: list[float], refinement: Refinement | None) -> Trajectory:
    segment = Segment("policy", "x", list(range(len(logprobs))), logprobs)
    return Trajectory(id="q", question="q", golden_answers=["a"], segments=[segment],
                      metrics={"em": em}, refinement=refinement)  # fmt: skip


def test_the_confidence_table_reads_the_trajectories_as_sampled(tmp_path: Path) -> None:
    """Surprisal ranks the wrong samples above the right ones (ROC-AUC 1 here); a revised
    trajectory is left out (its tokens are the regeneration's), and the meta prompt's log-odds
    are read on the same ones."""
    (tmp_path / "r1" / "trajectories").mkdir(parents=True)
    write_trajectories(tmp_path / "r1" / "trajectories" / "step_1.jsonl", [
        _sampled(0.0, [-2.0, -1.0], None), _sampled(1.0, [-0.1, -0.1], None)])  # fmt: skip
    assert confidence_row(tmp_path / "r1")[1:] == ["2", "0.50", "1.000", "–"]

    def refined(before: float, odds: float, revised: bool) -> Refinement:
        return Refinement(revised=revised, cut_step=1 if revised else 0, prefix_segments=0,
                          log_odds=odds, original_em=before)  # fmt: skip

    (tmp_path / "r2" / "trajectories").mkdir(parents=True)
    write_trajectories(tmp_path / "r2" / "trajectories" / "step_1.jsonl", [
        _sampled(1.0, [-3.0], refined(0.0, 0.5, True)),  # revised: left out
        _sampled(0.0, [-2.0], refined(0.0, -0.5, False)),
        _sampled(1.0, [-0.1], refined(1.0, -0.1, False))])  # fmt: skip
    assert confidence_row(tmp_path / "r2")[1:] == ["2", "0.50", "1.000", "0.000"]
    assert confidence_row(tmp_path / "eval") is None


def test_a_folder_that_is_no_run_is_named_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither an evaluation"):
        rows_for(tmp_path, (0.0,))
