"""A run's environment on real questions: no world is generated, the index named is searched,
the references are grounded in it, and a world named among the files keeps its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config.data import world_preset
from searchrl.config.train import DataConfig
from searchrl.data.benchmarks import DataError
from searchrl.data.world import generate_world, write_world
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.corpus import read_corpus
from searchrl.train.environment import build_environment
from searchrl.types import Document

PASSAGES = [
    Document("w1", '"Glass Castle (film)"\nPrincipal photography began in Welch, West Virginia.'),
    Document("w2", '"Hamlet"\nHamlet is a tragedy written by William Shakespeare.'),
]
QUESTIONS = [
    {"id": "0", "question": "where was the glass castle filmed", "golden_answers": ["Welch"]},
    {"id": "1", "question": "who wrote hamlet", "golden_answers": ["William Shakespeare"]},
    {"id": "2", "question": "is hamlet a tragedy", "golden_answers": ["yes"]},
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    world = tmp_path / "world"
    write_world(generate_world(world_preset("test")), world)
    index = tmp_path / "index"
    BM25Retriever.build([*read_corpus(world / "corpus.jsonl"), *PASSAGES]).save(index)
    nq = tmp_path / "nq.jsonl"
    nq.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return world, index, nq


def test_real_questions_make_no_world_and_ground_their_references(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, index, nq = files
    out = tmp_path / "run"
    data = DataConfig(train_files=(str(nq),), index_dir=str(index))
    env = build_environment(data, out, topk=2, progress=False)
    assert env.world_dir is None and not (out / "world").exists()
    assert [q.uid for q in env.questions("train")] == ["nq:0", "nq:1", "nq:2"]
    refs = env.references("train")
    assert [(r.id, r.answer) for r in refs] == [("nq:0", "Welch"), ("nq:1", "William Shakespeare")]
    assert (out / "references_train.jsonl").read_text().count("\n") == 2


def test_a_world_among_the_files_keeps_its_scripted_references(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    world, index, nq = files
    data = DataConfig(train_files=(str(world), str(nq)), index_dir=str(index))
    env = build_environment(data, tmp_path / "run", topk=2, progress=False)
    questions = env.questions("train")
    assert {q.source for q in questions} == {"world", "nq"}
    refs = env.references("train")
    scripted = [r for r in refs if ":" not in r.id]
    assert len(scripted) == world_preset("test").train_questions
    assert {r.id for r in refs if ":" in r.id} == {"nq:0", "nq:1"}
    order = [q.uid for q in questions]
    uids = [r.id if ":" in r.id else f"world:{r.id}" for r in refs]
    assert uids == sorted(uids, key=order.index)  # the pool's shuffled order


def test_a_missing_file_stops_before_anything_is_built(tmp_path: Path) -> None:
    data = DataConfig(train_files=(str(tmp_path / "gone.parquet"),), index_dir="idx")
    with pytest.raises(DataError, match=r"gone\.parquet not found"):
        build_environment(data, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
