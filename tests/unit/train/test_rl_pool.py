"""Which questions RL draws: the warm start's trained questions left out, the hop-weighted
order of each pass over the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config.train import DataConfig
from searchrl.train.environment import TRAINED_QUESTIONS, Environment, read_question_ids
from searchrl.train.sampling import PromptSampler, hop_weights
from searchrl.types import Question


def _questions(n: int) -> list[Question]:
    return [
        Question(uid=f"world:train_{i}", question=f"q{i}", golden_answers=("a",), hops=1 + i % 4)
        for i in range(n)
    ]


def _environment(tmp_path: Path, n: int) -> Environment:
    return Environment(world_dir=tmp_path, retriever=None, splits={"train": _questions(n)})  # type: ignore[arg-type]


def test_the_warm_starts_questions_are_left_out(tmp_path: Path) -> None:
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / TRAINED_QUESTIONS).write_text("train_0\ntrain_2\n")
    env = _environment(tmp_path, 5)
    pool = env.training_pool(DataConfig(exclude_trained_by=str(sft)))
    assert [q.uid for q in pool] == ["world:train_1", "world:train_3", "world:train_4"]
    assert len(env.training_pool(DataConfig())) == 5
    ids = tmp_path / "ids.txt"
    ids.write_text("world:train_4\n\n")
    assert read_question_ids(ids) == {"world:train_4"}


def test_excluding_everything_or_nothing_readable_is_an_error(tmp_path: Path) -> None:
    env = _environment(tmp_path, 2)
    (tmp_path / "all.txt").write_text("train_0\ntrain_1\n")
    with pytest.raises(ValueError, match="none is left"):
        env.training_pool(DataConfig(exclude_trained_by=str(tmp_path / "all.txt")))
    with pytest.raises(FileNotFoundError, match=TRAINED_QUESTIONS):
        env.training_pool(DataConfig(exclude_trained_by=str(tmp_path / "missing")))


def test_hop_weights_put_heavier_questions_first_and_keep_every_question() -> None:
    qs = _questions(400)
    weights = hop_weights(qs, (1.0, 1.0, 4.0))  # 4 hops take the last weight
    assert weights[:4] == [1.0, 1.0, 4.0, 4.0]
    assert hop_weights(qs, ()) == []
    sampler = PromptSampler(qs, seed=0, weights=weights)
    first_pass = [q for _ in range(100) for q in sampler.next_batch(4)]
    assert len({q.uid for q in first_pass}) == 400  # a pass still serves every question once
    early = [q.hops for q in first_pass[:100]]
    assert sum(h >= 3 for h in early) >= 70  # 3 and 4 hops weigh 4: they come first (~80)
    uniform = PromptSampler(qs, seed=0)
    early = [q.hops for _ in range(25) for q in uniform.next_batch(4)]
    assert 30 < sum(h >= 3 for h in early) < 70
