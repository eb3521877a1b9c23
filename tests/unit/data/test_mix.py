"""Training mixes keep one uid per question, and the Search-R1 parquet round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from searchrl.config.data import MixConfig
from searchrl.data.benchmarks import DataError, load_benchmark, load_search_r1_parquet
from searchrl.data.mix import load_mix, mix_questions, write_search_r1_parquet
from searchrl.types import Question


def _questions(source: str, n: int) -> list[Question]:
    return [
        Question(f"{source}:train_{i}", f"{source} question {i}?", (f"answer {i}",), source)
        for i in range(n)
    ]


def _write_train(root: Path, source: str, n: int) -> None:
    (root / source).mkdir(parents=True)
    with (root / source / "train.jsonl").open("w") as f:
        for i in range(n):
            row = {"id": f"train_{i}", "question": f"{source} q{i}?", "golden_answers": ["a"]}
            f.write(json.dumps(row) + "\n")


def test_same_row_index_in_two_sources_stays_two_groups() -> None:
    mixed = mix_questions([_questions("nq", 5), _questions("hotpotqa", 5)], seed=0)
    assert len({q.uid for q in mixed}) == 10
    assert {q.uid for q in mixed} >= {"nq:train_0", "hotpotqa:train_0"}


def test_shuffle_is_seeded() -> None:
    groups = [_questions("nq", 20), _questions("hotpotqa", 20)]
    assert mix_questions(groups, seed=1) == mix_questions(groups, seed=1)
    assert mix_questions(groups, seed=1) != mix_questions(groups, seed=2)
    assert [q.uid for q in mix_questions(groups, seed=1)] != [q.uid for g in groups for q in g]


def test_duplicate_uids_are_refused() -> None:
    with pytest.raises(DataError, match="share uid 'nq:train_0'"):
        mix_questions([_questions("nq", 2), _questions("nq", 1)], seed=0)


def test_max_per_source() -> None:
    mixed = mix_questions([_questions("nq", 30), _questions("hotpotqa", 3)], 0, max_per_source=5)
    assert sum(q.source == "nq" for q in mixed) == 5
    assert sum(q.source == "hotpotqa" for q in mixed) == 3


def test_paper_mix_from_a_flashrag_folder(tmp_path: Path) -> None:
    _write_train(tmp_path, "nq", 4)
    _write_train(tmp_path, "hotpotqa", 3)
    extra = tmp_path / "mine.jsonl"
    extra.write_text(json.dumps({"id": "train_0", "question": "x?", "golden_answers": ["y"]}))
    mixed = load_mix(MixConfig(seed=3), data_dir=tmp_path, files=[extra])
    assert sorted({q.source for q in mixed}) == ["hotpotqa", "mine", "nq"]
    assert len({q.uid for q in mixed}) == len(mixed) == 8


def test_search_r1_parquet_round_trip(tmp_path: Path) -> None:
    questions = [
        *_questions("nq", 3),
        *_questions("hotpotqa", 2),
        Question("world:dev_0", "Who?", ("A", "B"), "world", hops=3, metadata={"path": ["x"]}),
    ]
    path = tmp_path / "train.parquet"
    write_search_r1_parquet(questions, path, split="train")
    rows = pq.read_table(path).to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2, 0, 1, 0]
    assert rows[0]["prompt"][0]["content"].endswith("Question: nq question 0?\n")
    assert rows[5]["reward_model"] == {"style": "rule", "ground_truth": {"target": ["A", "B"]}}
    assert rows[0]["ability"] == "fact-reasoning" and rows[0]["data_source"] == "nq"
    again = load_search_r1_parquet(path)
    assert again == questions
    assert again[5].metadata == {"path": ["x"]} and again[5].hops == 3


def test_real_files_round_trip_through_parquet(shared_data: Path, tmp_path: Path) -> None:
    questions = [
        *load_benchmark("nq", data_dir=shared_data / "qa"),
        *load_benchmark("hotpotqa", data_dir=shared_data / "qa"),
    ]
    path = tmp_path / "eval.parquet"
    write_search_r1_parquet(questions, path, split="test")
    again = load_search_r1_parquet(path)
    assert again == questions
    assert [q.metadata for q in again] == [q.metadata for q in questions]
