"""`searchrl rollout` and `searchrl chat` end to end: a tiny random model saved as a local
safetensors directory, a real BM25 index directory of the synthetic world, the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.data import world_preset
from searchrl.config.loading import load_config
from searchrl.config.model import ModelConfig
from searchrl.config.presets import resolve_config
from searchrl.config.train import TrainConfig
from searchrl.data.benchmarks import write_flashrag_jsonl
from searchrl.data.world import generate_world
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.io import read_trajectories
from searchrl.train.run import write_config

SHORT = ["rollout.max_response_tokens=6", "rollout.max_turns=1"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="module")
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
    root = tmp_path_factory.mktemp("cli")
    model_dir = root / "tiny"
    tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    world = generate_world(world_preset("test"))
    BM25Retriever.build(world.documents).save(root / "index")
    write_flashrag_jsonl(world.questions["test"], root / "test.jsonl")
    return {"model": model_dir, "index": root / "index", "data": root / "test.jsonl"}


def test_rollout_command_writes_trajectories_and_prints_metrics(setup, tmp_path: Path) -> None:
    out = tmp_path / "trajs.jsonl"
    args = ["rollout", "--model", str(setup["model"]), "--index", str(setup["index"])]
    args += ["--data", str(setup["data"]), "--out", str(out), "--limit", "3", "--n", "2"]
    result = CliRunner().invoke(app, [*args, "--greedy", *SHORT])
    assert result.exit_code == 0, result.output
    trajs = read_trajectories(out)
    assert [t.sample for t in trajs] == [0, 1] * 3
    assert all(t.stats.turns == 2 for t in trajs)
    assert trajs[0].segments == trajs[1].segments  # greedy: both samples agree
    row = json.loads(out.read_text().splitlines()[0])
    assert {"id", "segments", "stats", "metrics"} <= set(row)
    for name in ("EM", "F1", "SubEM", "searches / trajectory"):
        assert name in result.output


def test_rollout_takes_a_files_rows_as_eval_does(setup, tmp_path: Path) -> None:
    """`--data FILE[a:b]` rolls out rows a..b-1 (it was read as a missing file name)."""
    out = tmp_path / "rows.jsonl"
    wanted = [json.loads(x)["question"] for x in setup["data"].read_text().splitlines()[2:4]]
    args = ["rollout", "--model", str(setup["model"]), "--index", str(setup["index"])]
    args += ["--data", f"{setup['data']}[2:4]", "--out", str(out), "--greedy", *SHORT]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [t.question for t in read_trajectories(out)] == wanted


def test_chat_reads_questions_from_stdin(setup) -> None:
    args = ["chat", "--model", str(setup["model"]), "--index", str(setup["index"]), *SHORT]
    result = CliRunner().invoke(app, args, input="Who founded the first company?\n\n")
    assert result.exit_code == 0, result.output
    assert "? Who founded the first company?" in result.output
    assert "My previous action is invalid" in result.output  # the env feedback is shown
    assert "answer: None" in result.output


def test_rollout_command_rejects_bad_overrides(setup, tmp_path: Path) -> None:
    args = ["rollout", "--data", str(setup["data"]), "--out", str(tmp_path / "x.jsonl")]
    result = CliRunner().invoke(app, [*args, "--index", str(setup["index"]), "topk=3"])
    assert result.exit_code == 2 and "did you mean rollout.topk?" in result.stderr


def test_rollout_says_which_model_and_takes_a_runs_settings(setup, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(setup["model"], run / "model")
    write_config(load_config(TrainConfig, resolve_config("tiny_cpu_grpo")), run)
    args = ["rollout", "--model", str(run), "--index", str(setup["index"]), "--limit", "1",
            "--data", str(setup["data"]), "--greedy", "rollout.max_response_tokens=4"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output
    assert f"model: {run / 'model'}" in result.stderr  # a run folder means its model/
    said = [line for line in result.stderr.splitlines() if "rollout settings of the run" in line]
    assert len(said) == 1 and "max_turns=5" in said[0]
    assert read_trajectories(tmp_path / "a.jsonl")[0].stats.turns == 6
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b.jsonl"),
                                      "--no-run-settings"])  # fmt: skip
    assert result.exit_code == 0 and "rollout settings" not in result.stderr
    assert read_trajectories(tmp_path / "b.jsonl")[0].stats.turns == 5  # the default 4 + 1
