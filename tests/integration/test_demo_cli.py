"""`searchrl demo`'s happy path, shrunk to seconds: a tiny random model stands in for the
embedded one, a 60-entity world, 4 SFT examples, one GRPO step. Every output the README
promises is written, and a rerun reuses the finished stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.demo import DemoConfig
from searchrl.config.loading import load_config, to_dict
from searchrl.models.loading import tiny_model
from searchrl.train.demo_stages import StageMismatch, check_stages
from searchrl.train.run import write_config


def _overrides(model: Path) -> list[str]:
    world = ["world.num_entities=60", "world.train_questions=20", "world.dev_questions=4",
             "world.test_questions=6"]  # fmt: skip
    sft = [f"sft.model.name_or_path={model}", "sft.max_examples=4", "sft.batch_size=2",
           "sft.micro_batch_size=1", "sft.policy.autocast=fp32"]  # fmt: skip
    rl = [f"rl.model.name_or_path={model}", "rl.steps=1", "rl.batch_size=2", "rl.n_samples=2",
          "rl.mini_batch_size=2", "rl.micro_batch_size=2", "rl.data.eval_size=6",
          "rl.rollout.max_turns=1", "rl.rollout.max_response_tokens=8",
          "rl.policy.autocast=fp32", "rl.logging.progress=false",
          "rl.screen.samples=0"]  # fmt: skip
    return world + sft + rl


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_demo_writes_everything_and_a_rerun_reuses_the_stages(tokenizer, tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(model)
    tokenizer.save_pretrained(model)
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), *_overrides(model)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output + repr(first.exception)
    assert "RL gain" in first.output and "wall time" in first.output
    # the RL stage says where it departs from the recipe, and how much the warm start saw
    assert "the CPU recipe (tiny_cpu_grpo), except steps 1" in " ".join(first.output.split())
    assert "hop fact stated in the warm start's references: 0%" in first.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 6 and {"em_before", "em_after", "gain", "em_by_hops"} <= set(summary)
    assert sum(row["n"] for row in summary["em_by_hops"].values()) == 6
    assert summary["gain"]["wins"] + summary["gain"]["losses"] + summary["gain"]["ties"] == 6
    assert {"diff", "low", "high"} <= set(summary["gain"])
    # the signal RL was given: informative groups trained, distance moved, the probe (the
    # world's 4 dev questions, before and after)
    assert summary["informative_groups"] >= 0 and summary["moved"] >= 0
    assert len(summary["probe"]["pass@1"]) == 2 and "RL's signal:" in first.output
    for path in ("report.html", "curves.png", "grpo/model/config.json", "sft/model/config.json",
                 "world/manifest.json", "grpo/trajectories/eval_step_0.jsonl"):  # fmt: skip
        assert (out / path).is_file(), path
    sft_summary = (out / "sft" / "summary.json").stat().st_mtime_ns
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output + repr(second.exception)
    assert (out / "sft" / "summary.json").stat().st_mtime_ns == sft_summary  # SFT reused
    assert json.loads((out / "summary.json").read_text())["n"] == 6


def _recorder(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Stands in for the demo's stages (minutes of training): records where it was run."""
    calls: list[Path] = []
    monkeypatch.setattr("searchrl.train.demo.run_demo", lambda config, out: calls.append(out))
    return calls


def _stages(out: Path, steps: int) -> None:
    """A demo folder as a run with `rl.steps=STEPS` left it (world and GRPO configs)."""
    config = load_config(DemoConfig, overrides=[f"rl.steps={steps}"])
    (out / "world").mkdir(parents=True)
    (out / "world" / "manifest.json").write_text(json.dumps({"config": to_dict(config.world)}))
    write_config(config.rl, out / "grpo")
    (out / "notes.txt").write_text("mine\n")


def test_a_rerun_with_other_settings_is_refused_and_force_starts_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _recorder(monkeypatch)
    out = tmp_path / "demo"
    _stages(out, steps=2)
    same = CliRunner().invoke(app, ["demo", "--out", str(out), "rl.steps=2"])
    assert same.exit_code == 0 and calls == [out]  # the same settings: stages reused
    other = CliRunner().invoke(app, ["demo", "--out", str(out), "rl.steps=3", "--seed", "4"])
    assert other.exit_code == 1 and len(calls) == 1
    errors = [line for line in other.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and f"{out / 'world'} was made with other settings" in errors[0]
    assert "seed: 0 there, 4 now" in errors[0] and "pass --force" in errors[0]
    forced = CliRunner().invoke(app, ["demo", "--out", str(out), "rl.steps=3", "--force"])
    assert forced.exit_code == 0 and calls == [out, out]
    assert not (out / "world").exists() and not (out / "grpo").exists()
    assert (out / "notes.txt").read_text() == "mine\n"  # only the demo's own stages go


def test_a_grpo_stage_with_other_settings_is_named(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    _stages(out, steps=2)
    config = load_config(DemoConfig, overrides=["rl.steps=5"])
    with pytest.raises(StageMismatch, match=r"grpo was made with other settings \(steps: 2 there"):
        check_stages(config, out)
    check_stages(load_config(DemoConfig, overrides=["rl.steps=2"]), out)
