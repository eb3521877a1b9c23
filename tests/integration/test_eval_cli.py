"""`searchrl eval` end to end through the real CLI: a tiny random model saved as a local
directory, a real BM25 index of a generated world, the world's test split (which has hops)."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from test_server import serving
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
from searchrl.retrieval.server import create_app
from searchrl.train.run import write_config

SHORT = ["--set", "rollout.max_response_tokens=6", "rollout.max_turns=1"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """One torch thread (tests/conftest.py)."""


@pytest.fixture(scope="module")
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
    root = tmp_path_factory.mktemp("eval_cli")
    model_dir = root / "tiny"
    tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    world = generate_world(world_preset("test"))
    BM25Retriever.build(world.documents).save(root / "index")
    (root / "world").mkdir()
    write_flashrag_jsonl(world.questions["test"], root / "world" / "test.jsonl")
    return {"model": model_dir, "index": root / "index", "data": root / "world" / "test.jsonl"}


def run(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def lines(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]


def test_eval_rag_writes_rows_and_a_rerun_never_duplicates(setup, tmp_path: Path) -> None:
    out = tmp_path / "rag"
    base = ["eval", "--method", "rag", "--data", str(setup["data"]), "--index", str(setup["index"])]
    base += ["--model", str(setup["model"]), "--out", str(out), *SHORT]
    args = [*base, "--limit", "3"]
    printed = run(args)
    rows = lines(out)
    assert len(rows) == 3 and len({r["id"] for r in rows}) == 3
    assert all({"id", "em", "set", "hops", "trajectory"} <= set(r) for r in rows)
    assert all(r["set"] == "world" and r["hops"] >= 1 and r["searches"] == 1 for r in rows)
    assert all(len(r["documents"]) == 3 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 3 and "by_hops" in summary and summary["method"] == "rag"
    assert "EM [95% CI]" in printed
    run(args)
    assert len(lines(out)) == 3
    run([*base, "--limit", "5"])  # a larger limit completes the rest
    assert [r["id"] for r in lines(out)][:3] == [r["id"] for r in rows] and len(lines(out)) == 5


def test_eval_compare_and_judge(setup, tmp_path: Path) -> None:
    common = ["--data", str(setup["data"]), "--model", str(setup["model"]), "--limit", "4"]
    run(["eval", "--method", "direct", *common, "--out", str(tmp_path / "d"), *SHORT])
    run(["eval", "--method", "search-r1", *common, "--index", str(setup["index"]),
         "--out", str(tmp_path / "s"), *SHORT])  # fmt: skip
    printed = run(["eval", "compare", str(tmp_path / "s"), str(tmp_path / "d"),
                   "--out", str(tmp_path / "cmp.json")])  # fmt: skip
    result = json.loads((tmp_path / "cmp.json").read_text())
    assert result["rows"]["overall"]["n"] == 4 and "p" in printed
    run(["eval", "judge", str(tmp_path / "s"), str(tmp_path / "d"), "--kind", "rule",
         "--out", str(tmp_path / "judge.json")])  # fmt: skip
    judged = json.loads((tmp_path / "judge.json").read_text())
    counts = judged["overall"]["non_redundancy"]
    assert counts["wins"] + counts["losses"] + counts["ties"] + counts["unscored"] == 4


def test_eval_against_a_retrieval_server(setup, tmp_path: Path) -> None:
    app = create_app(lambda: BM25Retriever.load(setup["index"]))
    with serving(app) as base:
        client = httpx.Client()
        deadline = time.monotonic() + 20
        while client.get(f"{base}/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        args = ["eval", "--method", "search-o1", "--data", str(setup["data"]), "--url"]
        args += [f"{base}/retrieve", "--model", str(setup["model"]), "--limit", "2"]
        run([*args, "--out", str(tmp_path / "o1"), *SHORT])
    rows = lines(tmp_path / "o1")
    assert len(rows) == 2 and all(r["method"] == "search-o1" for r in rows)


def test_eval_refuses_incomplete_requests(setup, tmp_path: Path) -> None:
    base = ["eval", "--data", str(setup["data"]), "--out", str(tmp_path / "x"), "--limit", "1"]
    trained = CliRunner().invoke(
        app, [*base, "--method", "search-r1", "--index", str(setup["index"])]
    )
    assert trained.exit_code != 0 and "--model" in trained.output
    no_index = CliRunner().invoke(app, [*base, "--method", "rag"])
    assert no_index.exit_code != 0 and "--index" in no_index.output
    unknown = CliRunner().invoke(app, [*base, "--method", "magic"])
    assert unknown.exit_code != 0 and "unknown method" in unknown.output


def test_a_rerun_with_another_index_is_refused_and_leaves_the_folder_as_it_was(
    setup, tmp_path: Path
) -> None:
    """The interface an outside check runs: `eval --method rag … --index A --out DIR`, then
    the same with `--index B` into DIR."""
    other = tmp_path / "other-index"
    world = generate_world(replace(world_preset("test"), seed=1))
    BM25Retriever.build(world.documents).save(other)
    out = tmp_path / "rag"
    args = ["eval", "--method", "rag", "--data", str(setup["data"]), "--model", str(setup["model"]),
            "--limit", "2", "--out", str(out), *SHORT]  # fmt: skip
    run([*args, "--index", str(setup["index"])])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused = CliRunner().invoke(app, [*args, "--index", str(other)])
    assert refused.exit_code == 1
    errors = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and "retriever" in errors[0]
    assert str(other.resolve()) in errors[0] and "use another --out folder" in errors[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def _trained_run(setup: dict, root: Path, preset: str) -> Path:
    """A run folder as `searchrl train --config PRESET` leaves it: the resolved config (written
    by the trainer's own `write_config`) next to the exported `model/`."""
    run = root / "run"
    shutil.copytree(setup["model"], run / "model")
    config = load_config(TrainConfig, resolve_config(preset), [f"model.name_or_path={run}"])
    write_config(config, run)
    return run


def test_eval_of_a_trained_run_takes_its_rollout_settings(setup, tmp_path: Path) -> None:
    """The interface: `eval --method search-r1 --model RUN/model --index I --data Q --limit 2
    --out E` of a run trained with tiny_cpu_grpo records max_turns 5 and force_answer true."""
    run = _trained_run(setup, tmp_path, "tiny_cpu_grpo")
    args = ["eval", "--method", "search-r1", "--model", str(run / "model"), "--index",
            str(setup["index"]), "--data", str(setup["data"]), "--limit", "2"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "e"),
                                      "rollout.max_response_tokens=6"])  # fmt: skip
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "rollout settings of the run" in line]
    assert len(said) == 1 and "max_turns=5" in said[0] and "force_answer=true" in said[0]
    recorded = json.loads((tmp_path / "e" / "run.json").read_text())["rollout"]
    assert recorded["max_turns"] == 5 and recorded["force_answer"] is True
    assert recorded["max_response_tokens"] == 6  # the command line still wins
    assert recorded["temperature"] == 0.0  # evaluation stays greedy
    assert max(r["turns"] for r in lines(tmp_path / "e")) == 6  # 5 search rounds + 1
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "d"), "--no-run-settings",
                                      "rollout.max_response_tokens=6"])  # fmt: skip
    assert result.exit_code == 0 and "rollout settings of the run" not in result.stderr
    recorded = json.loads((tmp_path / "d" / "run.json").read_text())["rollout"]
    assert recorded["max_turns"] == 4 and recorded["force_answer"] is False


def test_eval_takes_positional_settings(setup, tmp_path: Path) -> None:
    """The interface: `eval --method direct --data Q --out E --limit 2
    rollout.max_response_tokens=8` (the tiny model stands in for the embedded one)."""
    out = tmp_path / "e"
    data = str(setup["data"])
    run(["eval", "--method", "direct", "--data", data, "--out", str(out), "--limit", "2",
         "rollout.max_response_tokens=8", "--model", str(setup["model"])])  # fmt: skip
    assert json.loads((out / "run.json").read_text())["rollout"]["max_response_tokens"] == 8
    assert len(lines(out)) == 2
    bad_args = ["eval", "--method", "direct", "--data", data, "--out", str(tmp_path / "x")]
    bad = CliRunner().invoke(app, [*bad_args, "rollout.max_turns=[1"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: rollout.max_turns: cannot parse '[1'")
    assert not (tmp_path / "x").exists()
