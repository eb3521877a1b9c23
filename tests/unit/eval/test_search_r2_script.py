"""`benchmarks/search_r2/search_r2.py` with one shared warm start (`--warm-start`) and another
world's test split (`--eval-world`): which stages a seed runs and what each command is given."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from search_r2 import THRESHOLD_KEY, Seed, stages


def _args(tmp_path: Path, **changes: object) -> argparse.Namespace:
    values = {"warm_start": tmp_path / "sft2", "eval_world": tmp_path / "unseen", "threshold": 0.02,
              "steps": 3, "batch": 8, "group": 4, "set": [], "test": 200, "train": 400,
              "entities": 500}  # fmt: skip
    return argparse.Namespace(**{**values, **changes})


def _option(command: list[str], key: str) -> str:
    """The value of `key=…` or of the flag `key` in a CLI command."""
    for i, part in enumerate(command):
        if part.startswith(f"{key}="):
            return part.split("=", 1)[1]
        if part == key:
            return command[i + 1]
    raise AssertionError(f"{key} not in {command}")


def test_a_shared_warm_start_runs_no_world_or_sft_of_its_own(tmp_path: Path) -> None:
    args = _args(tmp_path)
    (tmp_path / "sft2").mkdir()
    (tmp_path / "sft2" / "summary.json").write_text("{}")
    arms = ["r1_g", "conf_resample"]
    assert stages(arms, False, warm_start=True) == [
        "world", "eval_sft", "r1_g", "conf_resample", "eval_r1_g", "eval_conf_resample",
    ]  # fmt: skip
    assert stages(arms, False)[:2] == ["world", "sft"]
    seed = Seed(tmp_path / "out", 1, args)
    _, (index,) = seed.commands("world")  # only the evaluation world's index
    assert _option(index, "--corpus") == str(tmp_path / "unseen" / "corpus.jsonl")
    _, (train,) = seed.commands("conf_resample")
    assert _option(train, "policy.init_checkpoint") == str(tmp_path / "sft2" / "model")
    assert _option(train, "data.world_dir") == str(tmp_path / "sft2" / "world")
    assert _option(train, "seed") == "1"
    assert _option(train, "refiner.confidence_threshold") == "0.02"  # the summary has none
    _, (evaluation,) = seed.commands("eval_sft")
    assert _option(evaluation, "--model") == str(tmp_path / "sft2" / "model")
    assert _option(evaluation, "--data") == str(tmp_path / "unseen" / "test.jsonl")
    assert _option(evaluation, "--out") == str(tmp_path / "out" / "eval_sft")  # once, shared
    (tmp_path / "sft2" / "summary.json").write_text(json.dumps({THRESHOLD_KEY: 0.03}))
    _, (train,) = seed.commands("conf_resample")
    assert _option(train, "refiner.confidence_threshold") == "0.03"  # the warm start's own


def test_without_a_shared_warm_start_each_seed_evaluates_on_its_own_world(tmp_path: Path) -> None:
    seed = Seed(tmp_path / "out", 0, _args(tmp_path, warm_start=None, eval_world=None))
    _, (world, index) = seed.commands("world")
    assert _option(world, "--out") == str(tmp_path / "out" / "seed0" / "world")
    assert _option(index, "--corpus") == str(tmp_path / "out" / "seed0" / "world" / "corpus.jsonl")
    _, (train,) = seed.commands("r1_g")
    model = tmp_path / "out" / "seed0" / "sft" / "model"
    assert _option(train, "policy.init_checkpoint") == str(model)
    _, (evaluation,) = seed.commands("eval_sft")
    assert _option(evaluation, "--out") == str(tmp_path / "out" / "seed0" / "eval_sft")


def test_the_summary_reads_stage_times_as_the_stages_record_them(tmp_path: Path) -> None:
    """`times.json` holds {stage: {"wall", "cpu"}} (`stages.record`); the summary divided the
    entry itself by 60 and crashed at the end of a finished run."""
    from search_r2_summary import summarize

    seed = tmp_path / "seed0"
    seed.mkdir()
    (seed / "times.json").write_text(json.dumps({"r1_g": {"wall": 120.0, "cpu": 200.0}}))
    assert "- seed 0: r1_g 2.0" in summarize(tmp_path, [0], ["r1_g"])


def test_s_trim_above_the_random_cut_pools_only_seeds_that_have_both_arms() -> None:
    from search_r2_summary import s_trim_above

    assert s_trim_above([[0.3, 0.3], []], [[0.0, 0.0], [0.1]]) == (0.3, 0.3, 0.3)
    assert s_trim_above([[0.3]], [[]]) is None
    point, low, high = s_trim_above([[0.4, 0.0, 0.2], [0.1, 0.3]], [[0.0, -0.2], [0.1, 0.1]])
    assert point == pytest.approx(((0.2 - -0.1) + (0.2 - 0.1)) / 2)
    assert low < point < high


def test_the_summary_reports_s_trim_above_the_random_cut(tmp_path: Path) -> None:
    """The issue asks for S_trim above the random-cut arm's: the summary computes it from the
    arms' per-step metrics (it was worked out by hand before)."""
    from search_r2_summary import summarize

    for arm, values in (("full", [0.2, 0.4]), ("random_cut", [-0.1, 0.1])):
        folder = tmp_path / "seed0" / arm
        folder.mkdir(parents=True)
        rows = [{"step": i + 1, "refiner/s_trim": v} for i, v in enumerate(values)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = summarize(tmp_path, [0], ["r1_g", "full", "random_cut"])
    assert "| full Search-R2 (joint) | +0.300 [" in text
