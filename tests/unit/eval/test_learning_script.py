"""`benchmarks/training/learning.py --summarize` pairs two evaluations of the same questions; run
while one of them is still writing, it must not report a gain on the questions answered so far."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "training"))

import pytest

from learning_summary import _pairs, both_worlds_gain, paired_gain, references_worth
from searchrl.eval.stats import t_interval


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
    with_recipe = {(name, base) for _, name, base in _pairs(["recipe", "previous", "weak"])}
    assert ("eval_previous", "eval_recipe") in with_recipe
    assert ("evalx_previous", "evalx_recipe") in with_recipe  # on the unseen world too
    assert ("eval_previous", "eval_sft") in with_recipe
    assert ("eval_weak", "eval_recipe") not in with_recipe  # another warm start: not a lever
    without = {(name, base) for _, name, base in _pairs(["previous", "ppo"])}
    assert not any(base == "eval_recipe" for _, base in without)


def test_a_seeds_gain_pairs_both_worlds_question_by_question(tmp_path: Path) -> None:
    _write_eval(tmp_path / "eval_sft", [0.0, 1.0, 0.0, 1.0], finished=True)
    _write_eval(tmp_path / "eval_recipe", [1.0, 1.0, 1.0, 1.0], finished=True)
    _write_eval(tmp_path / "evalx_sft", [0.0, 0.0], finished=True)
    _write_eval(tmp_path / "evalx_recipe", [1.0, 0.0], finished=True)
    gain = both_worlds_gain(tmp_path, "recipe", "sft", seed=0)
    assert gain is not None
    assert gain.n == 6 and (gain.wins, gain.losses) == (3, 0)
    assert gain.diff == pytest.approx(3 / 6)
    (tmp_path / "evalx_recipe" / "summary.json").unlink()  # unseen world still running
    assert both_worlds_gain(tmp_path, "recipe", "sft", seed=0) is None


def test_references_worth_interpolates_and_never_extrapolates() -> None:
    curve = [(50, 0.10), (100, 0.30), (200, 0.50)]
    assert references_worth(curve, 0.20) == pytest.approx(75.0)
    assert references_worth(curve, 0.40) == pytest.approx(150.0)
    assert references_worth(curve, 0.05) is None and references_worth(curve, 0.6) is None


def test_t_interval_over_seeds() -> None:
    five = t_interval([0.10, 0.14, 0.12, 0.08, 0.16], 0.95)
    assert five.mean == pytest.approx(0.12) and five.interval == "t"
    # sd 0.0316, sem 0.0141, t(4) 2.776: half-width 0.0393
    assert five.low == pytest.approx(0.12 - 0.0393, abs=1e-3)
    assert five.high == pytest.approx(0.12 + 0.0393, abs=1e-3)
    assert t_interval([0.1], 0.95).interval == "point"


def test_every_arm_is_a_valid_config_on_top_of_the_recipe() -> None:
    from learning_arms import ARMS
    from searchrl.config.loading import load_config
    from searchrl.config.presets import resolve_config as resolve_preset
    from searchrl.config.train import TrainConfig

    for arm, (_, _, overrides) in ARMS.items():
        config = load_config(TrainConfig, resolve_preset("tiny_cpu_grpo"), list(overrides))
        assert config.mini_batch_size <= config.batch_size, arm
    previous = load_config(TrainConfig, resolve_preset("tiny_cpu_grpo"), list(ARMS["previous"][2]))
    assert previous.algo.scale_by_std and previous.data.exclude_trained_by == ""
    assert (previous.batch_size, previous.n_samples, previous.steps) == (8, 4, 12)
    assert previous.screen.samples == 0 and previous.policy.train_layers == 0
    old = load_config(TrainConfig, resolve_preset("tiny_cpu_grpo"), list(ARMS["old"][2]))
    assert (old.batch_size, old.n_samples, old.steps, old.optim.lr) == (2, 8, 24, 5e-6)
    assert old.algo.loss_agg == "seq-mean-token-sum-norm" and old.screen.samples == 0
    assert old.model.generation_dtype == "auto" and old.policy.train_layers == 0


def test_the_signal_row_reads_the_budget_and_the_probes() -> None:
    from learning_signal import signal_row

    rows = [
        {"step": 0, "probe/pass@1": 0.2, "probe/pass@k": 0.4, "signal/probe_kl": 0.0,
         "screen/kept_share": 0.5},
        {"step": 1, "signal/trained_total": 12, "signal/sampled_total": 16,
         "signal/informative_per_hour": 300.0, "signal/moved": 0.5, "timing_s/step": 60.0},
        {"step": 2, "signal/trained_total": 25, "signal/sampled_total": 32,
         "signal/informative_per_hour": 310.0, "signal/moved": 0.9, "timing_s/step": 60.0,
         "probe/pass@1": 0.3, "probe/pass@k": 0.55, "signal/probe_kl": 0.02},
    ]  # fmt: skip
    row = signal_row(rows)
    assert row is not None
    assert (row["steps"], row["trained"], row["sampled"]) == (2, 25, 32)
    assert row["pass1"] == (0.2, 0.3) and row["passk"] == (0.4, 0.55)
    assert row["kl"] == 0.02 and row["kept"] == 0.5 and row["minutes"] == 2.0
    assert signal_row(rows[:1]) is None  # no step yet


def test_pass_at_k_of_a_sampled_file(tmp_path: Path) -> None:
    from learning_signal import pass_at_k

    rows = [{"id": f"q{q}#{s}", "uid": f"q{q}", "metrics": {"em": float(q == 0 and s == 1)}}
            for q in range(2) for s in range(4)]  # fmt: skip
    path = tmp_path / "pass.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert pass_at_k(path) == (1 / 8, 0.5, 2)
    assert pass_at_k(tmp_path / "missing.jsonl") is None
