"""Benchmark registry and loaders, on the real shared files and on malformed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from searchrl.data.benchmarks import (
    BENCHMARKS,
    DataError,
    benchmark,
    load_benchmark,
    load_flashrag_jsonl,
    load_hf_dataset,
    load_questions,
    load_search_r1_parquet,
    write_flashrag_jsonl,
)
from searchrl.data.templates import search_r1_prompt

EXPECTED_ROWS = {
    "nq": 3610,
    "triviaqa": 3733,
    "popqa": 1574,
    "hotpotqa": 3655,
    "2wikimultihopqa": 3866,
    "musique": 1612,
    "bamboogle": 84,
}


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_registry_matches_the_papers() -> None:
    assert [b.name for b in BENCHMARKS] == list(EXPECTED_ROWS)
    assert {b.name for b in BENCHMARKS if b.in_domain} == {"nq", "hotpotqa"}
    assert {b.name for b in BENCHMARKS if not b.multi_hop} == {"nq", "triviaqa", "popqa"}
    assert benchmark("hotpotqa").eval_split == "dev"
    assert benchmark("bamboogle").eval_split == "test"
    assert benchmark("musique").category == "multi-hop"
    with pytest.raises(DataError, match="unknown benchmark"):
        benchmark("squad")


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_real_shared_files_load(shared_data: Path, name: str) -> None:
    questions = load_benchmark(name, data_dir=shared_data / "qa")
    assert len(questions) == EXPECTED_ROWS[name]
    assert len({q.uid for q in questions}) == len(questions)
    assert all(q.uid.startswith(f"{name}:") and q.source == name for q in questions)
    assert all(q.golden_answers and q.question for q in questions)


def test_musique_hop_counts_come_from_its_ids(shared_data: Path) -> None:
    questions = load_flashrag_jsonl(shared_data / "qa" / "musique.jsonl")
    hops = {q.hops for q in questions if q.uid.startswith("musique:2hop")}
    assert hops == {2}
    assert {q.hops for q in questions} >= {2, 3, 4, None}


def test_a_flat_eval_file_is_never_served_as_train(shared_data: Path) -> None:
    with pytest.raises(DataError, match="none of these files"):
        load_benchmark("nq", split="train", data_dir=shared_data / "qa")


def test_flashrag_layout_and_round_trip(tmp_path: Path) -> None:
    (tmp_path / "nq").mkdir()
    rows = [
        {"id": "train_0", "question": "who?", "golden_answers": ["a", "b"]},
        {"id": 7, "question": "what?", "golden_answers": "c", "metadata": {"k": 1}, "hops": 2},
    ]
    _write_lines(tmp_path / "nq" / "train.jsonl", [json.dumps(r) for r in rows])
    questions = load_benchmark("nq", split="train", data_dir=tmp_path)
    assert [q.uid for q in questions] == ["nq:train_0", "nq:7"]
    assert questions[1].golden_answers == ("c",) and questions[1].hops == 2
    write_flashrag_jsonl(questions, tmp_path / "copy.jsonl")
    again = load_flashrag_jsonl(tmp_path / "copy.jsonl", source="nq")
    assert again == questions and [q.metadata for q in again] == [{}, {"k": 1}]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"question": "q?", "golden_answers": ["a"]}', "'id'"),
        ('{"id": "1", "question": "  ", "golden_answers": ["a"]}', "'question'"),
        ('{"id": "1", "question": "q?", "golden_answers": []}', "golden_answers"),
        ('{"id": "1", "question": "q?", "golden_answers": [3]}', "golden_answers"),
        ('{"id": "1", "question": "q?", "golden_answers": ["a"], "metadata": 3}', "metadata"),
    ],
)
def test_malformed_jsonl_names_file_and_row(tmp_path: Path, line: str, message: str) -> None:
    good = '{"id": "0", "question": "fine?", "golden_answers": ["x"]}'
    path = _write_lines(tmp_path / "bad.jsonl", [good, "", line])
    with pytest.raises(DataError, match=message) as info:
        load_flashrag_jsonl(path)
    assert f"{path}: row 3" in str(info.value)


def test_duplicate_ids_in_one_file_are_an_error(tmp_path: Path) -> None:
    row = '{"id": "0", "question": "q?", "golden_answers": ["x"]}'
    with pytest.raises(DataError, match="duplicate id"):
        load_flashrag_jsonl(_write_lines(tmp_path / "dup.jsonl", [row, row]))


def _search_r1_row(source: str, index: int, question: str, answers: list[str]) -> dict:
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": search_r1_prompt(question)}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": "train", "index": index},
    }


def test_search_r1_parquet_recovers_questions_from_prompts(tmp_path: Path) -> None:
    rows = [
        _search_r1_row("nq", 0, "who wrote hamlet", ["Shakespeare"]),
        _search_r1_row("hotpotqa", 0, "Which is older, A or B?", ["A"]),
    ]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    questions = load_questions(path)
    assert [q.uid for q in questions] == ["nq:0", "hotpotqa:0"]
    assert questions[0].question == "who wrote hamlet?"
    assert questions[1].golden_answers == ("A",)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"data_source": None}, "data_source"),
        ({"reward_model": {"style": "rule"}}, "ground_truth"),
        ({"prompt": [{"role": "user", "content": "no marker here"}]}, "Question: "),
        ({"prompt": []}, "prompt"),
    ],
)
def test_malformed_parquet_names_file_and_row(tmp_path: Path, change: dict, message: str) -> None:
    rows = [_search_r1_row("nq", 0, "fine?", ["x"]), {**_search_r1_row("nq", 1, "q", ["y"])}]
    rows[1].update(change)
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=message) as info:
        load_search_r1_parquet(path)
    assert f"{path}: row 2" in str(info.value)


def test_not_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_text("hello")
    with pytest.raises(DataError, match="not a readable parquet"):
        load_search_r1_parquet(path)


def test_hub_loading_without_datasets_fails_clearly() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(DataError, match="needs the `datasets` package"):
            load_hf_dataset("nq")
    else:
        pytest.skip("datasets is installed; the Hub path would download")


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown format"):
        load_questions(tmp_path / "data.csv")
