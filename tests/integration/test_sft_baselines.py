"""The fine-tuned baselines end to end through the CLI: `searchrl sft source=rag|direct` on a
tiny generated world with a tiny random model, then `searchrl eval --method rag-ft|direct-ft`
with the checkpoint it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.models.loading import tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WORLD = ["data.world.num_entities=60", "data.world.train_questions=20",
         "data.world.dev_questions=4", "data.world.test_questions=4"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("source", ["rag", "direct"])
def test_fine_tuned_baseline_trains_and_evaluates(source: str, tokenizer, tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(model)
    tokenizer.save_pretrained(model)
    out = tmp_path / "sft"
    args = ["sft", "--config", "tiny_cpu_sft", "--out", str(out), f"source={source}",
            f"model.name_or_path={model}", "max_examples=6", "batch_size=2",
            "micro_batch_size=2", "policy.autocast=fp32", *WORLD]  # fmt: skip
    trained = CliRunner().invoke(app, args)
    assert trained.exit_code == 0, trained.output + repr(trained.exception)
    assert json.loads((out / "summary.json").read_text())["sft/examples"] == 6.0
    evaluated = tmp_path / "eval"
    eval_args = ["eval", "--method", f"{source}-ft", "--model", str(out / "model"), "--data",
                 str(out / "world" / "test.jsonl"), "--out", str(evaluated),
                 "--set", "rollout.max_response_tokens=6"]  # fmt: skip
    if source == "rag":
        index = tmp_path / "index"
        built = CliRunner().invoke(
            app,
            [
                "index",
                "--kind",
                "bm25",
                "--corpus",
                str(out / "world" / "corpus.jsonl"),
                "--out",
                str(index),
            ],
        )
        assert built.exit_code == 0, built.output
        eval_args += ["--index", str(index)]
    result = CliRunner().invoke(app, eval_args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    rows = [json.loads(x) for x in (evaluated / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["method"] for r in rows} == {f"{source}-ft"}
    assert all(r["searches"] == (1 if source == "rag" else 0) for r in rows)
