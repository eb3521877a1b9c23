"""Trajectory files round-trip exactly."""

from __future__ import annotations

import json

from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.rollout.io import read_trajectories, write_trajectories
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question


def test_write_then_read_gives_identical_trajectories(tokenizer, docs, tmp_path) -> None:
    def script(context: str) -> str:
        if "Doc 1(Title:" in context:
            return "<answer> Paris </answer>"
        return "<search> capital of France </search>"

    questions = [Question("q", "Capital of France?", ("Paris",)), Question("r", "Où?", ("ici",))]
    trajs = run_rollouts(
        ScriptedBackend(tokenizer, script),
        tokenizer,
        DictRetriever(docs),
        questions,
        RolloutConfig(),
        n_samples=2,
    )
    path = tmp_path / "nested" / "trajs.jsonl"
    assert write_trajectories(path, trajs) == 4
    assert read_trajectories(path) == trajs
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    for key in ("id", "question", "golden_answers", "segments", "answer", "searches", "stats"):
        assert key in first
    assert set(first["segments"][0]) == {"role", "text", "token_ids", "logprobs"}
    read = read_trajectories(path)
    for got, wrote in zip(read, trajs, strict=True):  # log-probs are outside `==`: compare them
        assert [s.logprobs for s in got.segments] == [s.logprobs for s in wrote.segments]
    policy = [s for t in read for s in t.segments if s.role == "policy"]
    env = [s for t in read for s in t.segments if s.role == "env"]
    assert all(len(s.logprobs or []) == len(s.token_ids) for s in policy)
    assert all(s.logprobs is None for s in env)
    assert first["metrics"] == {"em": 1.0, "f1": 1.0, "subem": 1.0}
