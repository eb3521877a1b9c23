"""`rollout_to_file`: chunked with progress, written atomically, never over a file without
`force`; `MeteredBackend` reports generated turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.models.loading import Policy
from searchrl.rollout.runner import MeteredBackend, rollout_to_file
from searchrl.types import Document, Question
from searchrl.utils.errors import OutputError


def search_then_answer(context: str) -> str:
    if "<information>" in context.rsplit("Question:", 1)[-1]:
        return "<answer> Paris </answer>"
    return "<search> capital of France </search>"


def _questions(n: int) -> list[Question]:
    return [Question(f"q{i}", f"Capital {i} of France?", ("Paris",)) for i in range(n)]


def _trajectory_lines(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.pop("stats")  # wall-clock timings differ between runs
    return rows


def test_chunks_report_progress_and_match_one_batch(
    tokenizer, docs: list[Document], tmp_path: Path
) -> None:
    policy = Policy(ScriptedBackend(tokenizer, search_then_answer), tokenizer, None)
    config = RolloutConfig(max_turns=2)
    done: list[int] = []
    whole = rollout_to_file(policy, DictRetriever(docs), _questions(5), config,
                            tmp_path / "a.jsonl", n_samples=2, seed=3)  # fmt: skip
    parts = rollout_to_file(policy, DictRetriever(docs), _questions(5), config,
                            tmp_path / "b.jsonl", n_samples=2, seed=3, chunk=2,
                            progress=done.append)  # fmt: skip
    assert done == [2, 2, 1]
    assert whole.em == parts.em == 1.0 and parts.trajectories == 10
    assert _trajectory_lines(tmp_path / "a.jsonl") == _trajectory_lines(tmp_path / "b.jsonl")


def test_an_existing_file_is_replaced_only_with_force(
    tokenizer, docs: list[Document], tmp_path: Path
) -> None:
    policy = Policy(ScriptedBackend(tokenizer, search_then_answer), tokenizer, None)
    out = tmp_path / "t.jsonl"
    out.write_text("earlier\n")
    with pytest.raises(OutputError, match="pass --force"):
        rollout_to_file(policy, DictRetriever(docs), _questions(1), RolloutConfig(), out,
                        n_samples=1, seed=0)  # fmt: skip
    assert out.read_text() == "earlier\n"
    rollout_to_file(policy, DictRetriever(docs), _questions(1), RolloutConfig(), out,
                    n_samples=1, seed=0, force=True)  # fmt: skip
    assert len(out.read_text().splitlines()) == 1 and list(tmp_path.iterdir()) == [out]


def test_metered_backend_reports_each_generation_call(tokenizer) -> None:
    inner = ScriptedBackend(tokenizer, search_then_answer)
    metered = MeteredBackend(inner)
    heard: list[int] = []
    from searchrl.models.generation import SamplingParams

    prompts = [tokenizer.encode("Question: a\n"), tokenizer.encode("Question: b\n")]
    params = [SamplingParams(max_new_tokens=20)] * 2
    metered.generate(prompts, params)
    with metered.reporting(heard.append):
        metered.generate(prompts, params)
        metered.generate(prompts[:1], params[:1])
    metered.generate(prompts, params)
    assert heard == [2, 1]
    assert metered.generated == inner.generated  # everything else is the wrapped backend's
