"""`searchrl train rollout.search=false` (the R1 baseline: RL without a search engine) runs end
to end: one policy turn per trajectory, no search, no env tokens, the R1 prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.model import ModelConfig
from searchrl.data.templates import r1_prompt
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_train_without_search_engine(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
    model_dir = tmp_path / "tiny"
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "r1"
    overrides = [
        f"model.name_or_path={model_dir}",
        "steps=1",
        "batch_size=2",
        "n_samples=2",
        "mini_batch_size=2",
        "micro_batch_size=4",
        "data.eval_size=2",
        "data.world.num_entities=60",
        "data.world.train_questions=20",
        "data.world.dev_questions=4",
        "data.world.test_questions=4",
        "rollout.search=false",
        "algo.dynamic_sampling=false",
        "rollout.max_response_tokens=8",
        "policy.autocast=fp32",
        "logging.progress=false",
        "screen.samples=0",
    ]
    args = ["train", "--config", "tiny_cpu_grpo", "--out", str(out), *overrides]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    lines = (out / "trajectories" / "step_1.jsonl").read_text().splitlines()
    trajectories = [json.loads(line) for line in lines]
    assert len(trajectories) == 4
    for traj in trajectories:
        assert [s["role"] for s in traj["segments"]] == ["policy"]
        assert traj["searches"] == [] and traj["stats"]["env_tokens"] == 0
        assert r1_prompt(traj["question"]) in traj["prompt"]
        assert "<search>" not in traj["prompt"]
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["env/number_of_valid_search"] == 0.0
