"""`searchrl train --config tiny_cpu_search_r2` end to end on a tiny random model and a tiny
world: the refiner's diagnostics are in metrics.jsonl under `refiner/`, every trajectory of the
step carries its refinement record, revised ones their meta segments and an exact prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.model import ModelConfig
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model
from searchrl.types import Trajectory


@pytest.fixture(scope="module")
def tiny_model_dir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
    out = tmp_path_factory.mktemp("tiny_model")
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_search_r2_preset_runs_one_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = [
        "train", "--config", "tiny_cpu_search_r2", "--out", str(tmp_path),
        "steps=1", "batch_size=2", "n_samples=4", "mini_batch_size=2", "data.eval_size=4",
        f"model.name_or_path={tiny_model_dir}",
        "data.world.num_entities=60",
        "data.world.train_questions=20",
        "data.world.dev_questions=4",
        "data.world.test_questions=4",
        "rollout.max_turns=2",
        "rollout.max_response_tokens=12",
        "policy.autocast=fp32",
        "algo.dynamic_sampling=false",
        "screen.samples=0",
        "signal.probe_every=0",
        "refiner.margin=-100.0",
        "logging.progress=false",
        "logging.tensorboard=false",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    step = rows[-1]
    refiner = {k for k in step if k.startswith("refiner/")}
    for part in ("revision", "accept", "a_prec", "s_trim"):
        assert any(part in k for k in refiner), (part, sorted(refiner))
    assert step["refiner/revision_rate"] == 1.0  # τ = −100: every trajectory is revised
    assert step["refiner/s_trim_n"] == 8 and step["refiner/a_prec_n"] == 8
    lines = (tmp_path / "trajectories" / "step_1.jsonl").read_text().splitlines()
    trajectories = [Trajectory.from_json(json.loads(line)) for line in lines]
    assert len(trajectories) == 8
    for traj in trajectories:
        record = traj.refinement
        assert record is not None and record.revised and record.revisions == 1
        assert 1 <= record.cut_step <= record.decisions[0].steps
        decision = record.decisions[0].decision
        assert decision.role == "meta" and decision.token_ids
        assert record.decisions[0].cut_step == record.cut_step


def test_sft_with_meta_examples_reports_refiner_accuracy(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The Search-R2 warm start end to end: the Actor's references, then a meta phase on
    corrupted references and the model's own oracle-labelled rollouts, then the report on
    held-out rollouts and held-out corrupted references."""
    args = [
        "sft", "--config", "tiny_cpu_sft", "--out", str(tmp_path),
        f"model.name_or_path={tiny_model_dir}", "max_examples=4", "meta_examples=6",
        "meta_rollouts=6", "meta_eval_size=4", "data.world.num_entities=60",
        "data.world.train_questions=20", "data.world.dev_questions=4",
        "data.world.test_questions=6", "policy.autocast=fp32", "rollout.max_turns=2",
        "rollout.max_response_tokens=12",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["sft/examples"] == 4.0 and summary["meta/synthetic_examples"] == 6.0
    assert summary["meta/replayed_references"] == 3.0  # meta_replay 0.5 of 6 meta examples
    assert summary["meta/rollouts"] == 6.0 and summary["meta/labelled"] == 4.0
    assert summary["meta/rollouts_taught_share"] == 0.0  # 16 untaught train questions
    # the final model rolled the same 4 held-out questions out again, and they were read
    assert summary["meta/final/labelled"] == 4.0 and 0.0 <= summary["meta/final/em"] <= 1.0
    final = (tmp_path / "trajectories" / "meta_final_held_out.jsonl").read_text().splitlines()
    held_uids = [
        json.loads(line)["uid"]
        for line in (tmp_path / "trajectories" / "meta_held_out.jsonl").read_text().splitlines()
    ]
    assert sorted(json.loads(line)["uid"] for line in final) == sorted(held_uids)
    assert all("flaw_step" in json.loads(line)["metrics"] for line in final)
    assert summary["meta/synthetic/labelled"] == 4.0
    # the Actor's own surprisal is read on its rollouts (for refiner.discriminator=confidence),
    # never on references, which carry no sampled log-probabilities
    for prefix in ("meta/", "meta/final/"):
        assert summary[f"{prefix}confidence/threshold_for_flawed_share"] > 0.0
        assert summary[f"{prefix}confidence/median_flawed"] > 0.0
    assert not any(k.startswith("meta/synthetic/confidence/") for k in summary)
    # the checked trimmer is scored on own rollouts only: references record no search results,
    # so every search of theirs would fail the "brings a new passage" check
    assert "meta/synthetic/trimmer_exact_step_checked" not in summary
    assert not any(k.startswith("meta/synthetic/checked/") for k in summary)
    for key in ("meta/trimmer_exact_step_checked", "meta/final/trimmer_exact_step_checked"):
        assert 0.0 <= summary.get(key, 0.0) <= 1.0  # absent where no held-out one is flawed
    for key in ("meta/discriminator_accuracy", "meta/synthetic/trimmer_exact_step"):
        assert 0.0 <= summary[key] <= 1.0 or summary[key] != summary[key]  # NaN: no flawed one
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("sft/loss" in r for r in rows)
    meta_steps = [r["step"] for r in rows if "meta_sft/loss" in r]
    assert meta_steps and min(meta_steps) > max(r["step"] for r in rows if "sft/loss" in r)

    # A second meta phase on the same own rollouts (no new rollouts): the same held-out
    # transcripts are read, the Actor phase is skipped. Half the train rollouts are relabelled
    # clean so that the phase keeps some (a random model's rollouts are all flawed): the
    # synthetic count must not include them (it did: the phase's list was `synthetic` itself).
    source = tmp_path / "relabelled" / "trajectories"
    source.mkdir(parents=True)
    rows = [json.loads(line) for line in (tmp_path / "trajectories" / "meta_train.jsonl").open()]
    assert all(row["metrics"]["flaw_step"] > 0 for row in rows)
    for row in rows[:3]:
        row["metrics"]["flaw_step"] = 0.0
    (source / "meta_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    held = (tmp_path / "trajectories" / "meta_held_out.jsonl").read_text()
    (source / "meta_held_out.jsonl").write_text(held)
    again = tmp_path / "again"
    reuse = [
        "sft", "--config", "tiny_cpu_sft", "--out", str(again),
        f"model.name_or_path={tiny_model_dir}", "max_examples=0", "meta_examples=2",
        f"meta_rollouts_from={source.parent}", "meta_eval_size=4",
        f"data.world_dir={tmp_path / 'world'}", "policy.autocast=fp32", "meta_train_layers=1",
    ]  # fmt: skip
    result = CliRunner().invoke(app, reuse)
    assert result.exit_code == 0, result.output + repr(result.exception)
    # meta_train_layers=1: the top (here the only) layer learnt, the embedding did not
    start, end = (
        load_file(tiny_model_dir / "model.safetensors"),
        load_file(again / "model" / "model.safetensors"),
    )
    changed = {name for name, value in start.items() if not torch.equal(value, end[name])}
    assert changed and all(n.startswith(("model.layers.0.", "model.norm.")) for n in changed)
    second = json.loads((again / "summary.json").read_text())
    assert second["meta/rollouts"] == summary["meta/rollouts"] == 6.0
    assert second["meta/labelled"] == 4.0
    assert second["meta/synthetic_examples"] == 2.0 and second["meta/rollout_examples"] == 6.0
    assert second["meta/replayed_references"] == 4.0  # the world's, no Actor phase here
    meta_rows = [json.loads(line) for line in (again / "metrics.jsonl").read_text().splitlines()]
    assert any("meta_sft/loss" in r for r in meta_rows)
    assert not any("sft/loss" in r for r in meta_rows)
    for name in ("meta_train", "meta_held_out"):
        first_rows = (source / f"{name}.jsonl").read_text()
        assert (again / "trajectories" / f"{name}.jsonl").read_text() == first_rows

    # Two runs' rollouts pooled (a comma between folders): every transcript of both, in
    # folder order, train and held-out; the balance is limited by the 3 clean ones.
    pooled = tmp_path / "pooled"
    both = [*reuse]
    both[4] = str(pooled)
    both[both.index(f"meta_rollouts_from={source.parent}")] = (
        f"meta_rollouts_from={source.parent}, {tmp_path}"
    )
    result = CliRunner().invoke(app, both)
    assert result.exit_code == 0, result.output + repr(result.exception)
    third = json.loads((pooled / "summary.json").read_text())
    assert third["meta/rollouts"] == 12.0 and third["meta/labelled"] == 8.0
    assert third["meta/rollout_examples"] == 6.0
    for name in ("meta_train", "meta_held_out"):
        first_rows = (source / f"{name}.jsonl").read_text()
        own_rows = (tmp_path / "trajectories" / f"{name}.jsonl").read_text()
        assert (pooled / "trajectories" / f"{name}.jsonl").read_text() == first_rows + own_rows

    # Rollouts of questions this world does not have carry labels of another world: refused.
    stray = tmp_path / "stray" / "trajectories"
    stray.mkdir(parents=True)
    rows = (tmp_path / "trajectories" / "meta_train.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    rows[0] = json.dumps({**first, "uid": "not-a-question"})
    (stray / "meta_train.jsonl").write_text("\n".join(rows) + "\n")
    held = (tmp_path / "trajectories" / "meta_held_out.jsonl").read_text()
    (stray / "meta_held_out.jsonl").write_text(held)
    reuse[reuse.index(f"meta_rollouts_from={source.parent}")] = f"meta_rollouts_from={stray.parent}"
    reuse[4] = str(tmp_path / "refused")
    result = CliRunner().invoke(app, reuse)
    assert result.exit_code == 1 and "not-a-question" in result.output
    assert not (tmp_path / "refused" / "model").exists()


def test_meta_rollouts_from_a_folder_without_rollouts_is_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A folder without kept own rollouts is refused with one line before any training."""
    args = [
        "sft", "--config", "tiny_cpu_sft", "--out", str(tmp_path / "out"),
        f"model.name_or_path={tiny_model_dir}", "max_examples=2", "meta_examples=2",
        f"meta_rollouts_from={tmp_path / 'nothing'}", "data.world.num_entities=60",
        "data.world.train_questions=20", "data.world.dev_questions=4",
        "data.world.test_questions=6", "policy.autocast=fp32",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    message = result.output.strip()
    assert "meta_rollouts_from" in message and "does not exist" in message
    assert len(message.splitlines()) == 1
    assert not (tmp_path / "out" / "model").exists()


def test_meta_train_layers_beyond_the_model_is_refused_before_training(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """meta_train_layers above the model's layer count is one line, before the Actor's SFT
    (the README's recipe names 15 of SmolLM2's 30; a smaller model would otherwise lose the
    Actor phase and its rollouts before the meta phase refused)."""
    args = [
        "sft", "--config", "tiny_cpu_sft", "--out", str(tmp_path / "out"),
        f"model.name_or_path={tiny_model_dir}", "max_examples=2", "meta_examples=2",
        "meta_train_layers=2", "data.world.num_entities=60", "data.world.train_questions=20",
        "data.world.dev_questions=4", "data.world.test_questions=6", "policy.autocast=fp32",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    message = result.output.strip()
    last = message.splitlines()[-1]  # after the model's loading bar: one line, no traceback
    assert last == "error: meta_train_layers: train_layers=2 but the model has 1 layers"
    assert "Traceback" not in message
    metrics = tmp_path / "out" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()  # no Actor step ran
