"""`searchrl train` end to end on a tiny random model and a tiny generated world: it writes
metrics.jsonl, config.yaml and checkpoints, and `--resume` continues where it stopped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.model import ModelConfig
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model


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


def _overrides(model_dir: Path, steps: int) -> list[str]:
    return [
        f"model.name_or_path={model_dir}",
        "model.generation_dtype=auto",
        f"steps={steps}",
        "batch_size=2",
        "n_samples=2",
        "mini_batch_size=2",
        "micro_batch_size=4",
        "save_every=1",
        "data.eval_size=2",
        "data.world.num_entities=60",
        "data.world.train_questions=20",
        "data.world.dev_questions=4",
        "data.world.test_questions=4",
        "rollout.max_turns=1",
        "rollout.max_response_tokens=8",
        "policy.autocast=fp32",
        "logging.progress=false",
        "screen.samples=0",  # a random model solves nothing: screening would keep no question
    ]


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny_cpu_grpo", "tiny_cpu_ppo"])
def test_train_writes_run_folder_and_resumes(
    preset: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    args = ["train", "--config", preset, "--out", str(tmp_path)]
    first = runner.invoke(app, [*args, *_overrides(tiny_model_dir, 1)])
    assert first.exit_code == 0, first.output + repr(first.exception)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert "val/em" in rows[0] and "critic/score/mean" in rows[1] and "timing_s/gen" in rows[1]
    # the signal: the probe (the world's 4 dev questions) before the first step and after the
    # last, the budget after every step
    assert rows[1]["signal/sampled_total"] >= 2 and "signal/moved" in rows[1]
    if preset == "tiny_cpu_grpo":  # the recipe probes; the PPO preset does not
        assert "probe/pass@1" in rows[0] and "probe/pass@k" in rows[1]
        assert (tmp_path / "trajectories" / "probe_step_0.jsonl").is_file()
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["steps"] == 1
    assert (tmp_path / "checkpoints" / "step_000001").is_dir()
    assert (tmp_path / "model" / "config.json").is_file()

    second = runner.invoke(app, [*args, "--resume", *_overrides(tiny_model_dir, 2)])
    assert second.exit_code == 0, second.output + repr(second.exception)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert (tmp_path / "checkpoints" / "step_000002").is_dir()
