"""`reward.kind=hybrid` in real trainer steps: the judge scores a whole round of trajectories
at once, the gated scores reach the advantages, and the reward metrics are logged, both
through `Trainer` directly and through `searchrl train`."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from tests.unit.train.fakes import VOCAB, questions, tiny_config, tiny_llama
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.model import ModelConfig
from searchrl.config.train import RewardConfig
from searchrl.data.templates import format_information
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model
from searchrl.reward.scoring import make_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.types import Question, SearchCall, Trajectory

GOOD = '"Yes"\nThe answer is yes.'
NOISE = '"Noise"\nNothing to see here.'


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def searching_rollout(
    qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
) -> list[Trajectory]:
    """Two searches each (one finds the answer, one finds noise, or both noise); right about
    half the time; token ids random but real segments with `<information>` observations."""
    out = []
    for qi, q in enumerate(qs):
        for s in range(n_samples):
            rng = random.Random(seed * 1009 + qi * 31 + s)
            t = Trajectory(id=f"{q.uid}#{s}", question=q.question, golden_answers=["yes"])
            t.uid, t.sample = q.uid, s
            t.prompt_ids = [rng.randrange(1, VOCAB) for _ in range(4)]
            for turn, doc in enumerate([GOOD if rng.random() < 0.5 else NOISE, NOISE]):
                t.append("policy", "<search> q </search>", [rng.randrange(1, VOCAB)] * 3)
                t.searches.append(SearchCall(query="q", doc_ids=[doc.split('"')[1]], turn=turn))
                t.append("env", format_information([doc]), [rng.randrange(1, VOCAB)] * 2)
            t.answer = "yes" if rng.random() < 0.6 else "no"
            t.append("policy", f"<answer> {t.answer} </answer>", [rng.randrange(1, VOCAB)] * 2)
            t.stats.searches = 2
            out.append(t)
    return out


def test_trainer_step_with_the_hybrid_reward_logs_judge_metrics() -> None:
    config = tiny_config(steps=2, reward={"kind": "hybrid", "judge": "rule"})
    policy = prepare_policy(tiny_llama(), config.policy)
    reward = make_reward(config.reward)
    trainer = Trainer(
        config, policy, None, frozen_reference(policy, False), 0, searching_rollout, reward,
        questions(),
    )  # fmt: skip
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    metrics, trajectories = trainer.step()
    scores = {t.reward["score"] for t in trajectories}
    assert scores <= {0.0, 1.0, 1.5} and 1.5 in scores
    for t in trajectories:
        useful = t.searches[0].doc_ids == ["Yes"]
        expected = (1.5 if useful else 1.0) if t.answer == "yes" else 0.0
        assert t.reward["score"] == expected
    judged = [t for t in trajectories if t.reward["em"] == 1]
    assert metrics["reward/judged"] == len(judged)
    assert metrics["reward/useful_share"] == pytest.approx(
        sum(t.reward["useful_searches"] for t in judged) / (2 * len(judged))
    )
    keys = [(t.question, t.searches[0].doc_ids[0]) for t in judged]
    assert metrics["reward/judge_cache_hits"] == len(keys) - len(set(keys))  # alike samples
    assert metrics["reward/judge_seconds"] >= 0 and metrics["reward/judge_malformed"] == 0
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert RewardConfig(kind="hybrid").judge == "rule"


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


@pytest.mark.slow
def test_searchrl_train_with_the_oracle_judge(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = [
        "train", "--config", "tiny_cpu_grpo", "--out", str(tmp_path),
        f"model.name_or_path={tiny_model_dir}", "steps=1", "batch_size=2", "n_samples=2",
        "mini_batch_size=2", "micro_batch_size=4", "data.eval_size=2",
        "data.world.num_entities=60", "data.world.train_questions=20",
        "data.world.dev_questions=4", "data.world.test_questions=4", "rollout.max_turns=1",
        "rollout.max_response_tokens=8", "policy.autocast=fp32", "logging.progress=false",
        "reward.kind=hybrid", "reward.judge=oracle", "screen.samples=0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    step = rows[-1]
    for key in ("reward/process", "reward/useful_share", "reward/judge_seconds",
                "reward/judge_cache_hits", "reward/judged"):  # fmt: skip
        assert key in step
    first = json.loads((tmp_path / "trajectories" / "step_1.jsonl").read_text().splitlines()[0])
    assert "process" in first["reward"] and "searches_judged" in first["reward"]
    question = json.loads((tmp_path / "world" / "train.jsonl").read_text().splitlines()[0])
    assert all(question["metadata"]["support"])
