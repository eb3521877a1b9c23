"""`searchrl sft --resume`: a warm start killed part-way continues from its last checkpoint
and ends exactly where an unbroken run ends (same weights, same metrics); the checkpoints
are gone once the model is exported. A tiny random model and a tiny world keep it seconds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.models.loading import tiny_model
from searchrl.train.sft_checkpoint import PhaseCheckpoints

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOLATILE = ("tokens_per_s",)


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _args(model: Path, out: Path) -> list[str]:
    return ["sft", "--config", "tiny_cpu_sft", "--out", str(out), "--model", str(model),
            "max_examples=8", "batch_size=2", "micro_batch_size=2", "save_every=1",
            "policy.autocast=fp32", "data.world.num_entities=60",
            "data.world.train_questions=20", "data.world.dev_questions=4",
            "data.world.test_questions=4"]  # fmt: skip


def _result(out: Path) -> tuple[str, list[dict]]:
    weights = hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    stable = [{k: v for k, v in r.items() if not k.endswith(VOLATILE)} for r in rows]
    return weights, stable


def test_a_killed_sft_resumes_to_the_same_model(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = CliRunner().invoke(app, _args(model_dir, tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output + repr(whole.exception)
    expected = _result(tmp_path / "whole")
    assert [r["step"] for r in expected[1]] == [1, 2, 3, 4]
    assert not (tmp_path / "whole" / "checkpoints").exists()

    save = PhaseCheckpoints.save

    def killed_after_two(self, step, *args, **kwargs):
        save(self, step, *args, **kwargs)
        if step == 2:
            raise KeyboardInterrupt

    out = tmp_path / "killed"
    with monkeypatch.context() as patch:
        patch.setattr(PhaseCheckpoints, "save", killed_after_two)
        killed = CliRunner().invoke(app, _args(model_dir, out))
    assert killed.exit_code == 130 and (out / "checkpoints" / "sft" / "step_000002").is_dir()
    assert not (out / "model").exists()
    again = CliRunner().invoke(app, [*_args(model_dir, out)])
    assert again.exit_code == 1 and "pass --force" in again.stderr  # no silent restart

    resumed = CliRunner().invoke(app, [*_args(model_dir, out), "--resume"])
    assert resumed.exit_code == 0, resumed.output + repr(resumed.exception)
    assert _result(out) == expected
    assert not (out / "checkpoints").exists()
