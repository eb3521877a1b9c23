"""`data.train_files` / `data.val_files` specs: files of every format, row cuts, worlds, mixing
keyed per source, and one-line messages for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config.data import world_preset
from searchrl.data.benchmarks import DataError
from searchrl.data.sources import load_sources, missing_input, parse_spec
from searchrl.data.templates import search_r1_prompt
from searchrl.data.world import generate_world, write_world


def _jsonl(path: Path, prefix: str, n: int) -> Path:
    rows = [
        {"id": f"{prefix}_{i}", "question": f"{prefix} question {i}", "golden_answers": [str(i)]}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("text", "base", "start", "stop"),
    [
        ("a/nq.jsonl", "a/nq.jsonl", None, None),
        ("a/nq.jsonl[1000:]", "a/nq.jsonl", 1000, None),
        ("a/nq.jsonl[:100]", "a/nq.jsonl", None, 100),
        ("hf:nq:train[5:9]", "hf:nq:train", 5, 9),
    ],
)
def test_parse_spec(text: str, base: str, start: int | None, stop: int | None) -> None:
    spec = parse_spec(text)
    assert (spec.base, spec.start, spec.stop) == (base, start, stop)


def test_row_cuts_keep_the_rows_named(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "nq.jsonl", "nq", 10)
    questions = load_sources([f"{path}[7:]"], "train", seed=0)
    assert [q.uid for q in questions] == ["nq:nq_7", "nq:nq_8", "nq:nq_9"]
    with pytest.raises(DataError, match="no questions in rows 20"):
        load_sources([f"{path}[20:]"], "train", seed=0)


def test_merge_parquet_keeps_its_prompt_and_keys_groups_per_source(
    tmp_path: Path, merge_parquet
) -> None:
    path = merge_parquet(
        tmp_path / "train.parquet",
        {
            "nq": [("train_0", " who wrote hamlet ", ["Shakespeare"])],
            "hotpotqa": [("train_0", "Which is older, A or B?", ["A"])],
        },
    )
    questions = load_sources([str(path)], "train", seed=0)
    assert [q.uid for q in questions] == ["nq:train_0", "hotpotqa:train_0"]
    assert questions[0].question == "who wrote hamlet?"
    assert questions[0].prompt == search_r1_prompt("who wrote hamlet")


def test_several_files_mix_shuffled_and_refuse_a_shared_uid(tmp_path: Path) -> None:
    nq = _jsonl(tmp_path / "nq.jsonl", "q", 20)
    hotpot = _jsonl(tmp_path / "hotpotqa.jsonl", "q", 20)  # same ids, another source
    mixed = load_sources([str(nq), str(hotpot)], "train", seed=3)
    assert len({q.uid for q in mixed}) == 40
    assert {q.source for q in mixed[:10]} == {"nq", "hotpotqa"}  # shuffled, not concatenated
    assert mixed == load_sources([str(nq), str(hotpot)], "train", seed=3)
    with pytest.raises(DataError, match="share uid 'nq:q_0'"):
        load_sources([str(nq), f"{nq}[:1]"], "train", seed=0)


def test_a_world_is_one_source_among_files(tmp_path: Path) -> None:
    world = tmp_path / "world"
    write_world(generate_world(world_preset("test")), world)
    nq = _jsonl(tmp_path / "nq.jsonl", "q", 5)
    mixed = load_sources([str(world), str(nq)], "train", seed=0)
    assert {q.source for q in mixed} == {"world", "nq"}
    assert sum(q.source == "world" for q in mixed) == world_preset("test").train_questions
    test_split = load_sources([str(world)], "test", seed=0)
    assert len(test_split) == world_preset("test").test_questions


def test_missing_input_is_one_line_naming_the_file(tmp_path: Path) -> None:
    there = _jsonl(tmp_path / "nq.jsonl", "q", 2)
    gone = tmp_path / "data" / "train.parquet"
    message = missing_input([str(there), f"{gone}[10:]"], "data.train_files")
    assert message == f"data.train_files: {gone} not found"
    assert missing_input([str(there)], "data.train_files") is None
    with pytest.raises(DataError, match="not a world"):
        load_sources([str(tmp_path)], "train", seed=0)
