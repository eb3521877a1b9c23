"""Answer coverage agrees with a plain scan of the corpus; stats and the data CLI work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.data.benchmarks import load_flashrag_jsonl
from searchrl.data.coverage import CorpusIndex
from searchrl.data.stats import coverage, file_stats
from searchrl.types import Question

PASSAGES = [
    '"Hamlet"\nHamlet is a tragedy by William Shakespeare, set in Denmark.',
    '"New York"\nNew Yorkers call it the Big Apple; U.S. city, pop. 8,000,000.',
    '"Renewal"\nA renewed hope: the Yorkshire pudding (1747) and $5 bills.',
]
SCAN = "\n".join(PASSAGES).lower()


def _whole(answer: str) -> bool:
    answer = answer.lower().strip()
    return bool(re.search(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", SCAN))


@pytest.mark.parametrize(
    ("answer", "substring", "whole"),
    [
        ("Shakespeare", True, True),
        ("william shakespeare", True, True),
        ("speare", True, False),
        ("new york", True, True),
        ("ew yor", True, False),
        ("New Yorker", True, False),
        ("U.S.", True, True),
        ("$5", True, True),
        ("1747", True, True),
        ("(1747)", True, True),
        ("newed hope", True, False),
        ("Big Apple;", True, True),
        ("Denmark Norway", False, False),
        ("Paris", False, False),
        ("   ", False, False),
        ("...", False, False),
    ],
)
def test_coverage_by_hand(answer: str, substring: bool, whole: bool) -> None:
    index = CorpusIndex(PASSAGES)
    assert index.contains_substring(answer) is substring
    assert index.contains_whole_word(answer) is whole
    assert (answer.lower().strip() in SCAN and bool(answer.strip())) is substring
    assert _whole(answer) is whole or not answer.strip()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SCAN) - 1), st.integers(1, 12))
def test_coverage_agrees_with_a_plain_scan_on_corpus_slices(start: int, length: int) -> None:
    answer = SCAN[start : start + length]
    if "\n" in answer or not answer.strip():
        return
    index = CorpusIndex(PASSAGES)
    assert index.contains_substring(answer)
    assert index.contains_whole_word(answer) is _whole(answer)


def test_coverage_counts_questions_not_answers() -> None:
    index = CorpusIndex(PASSAGES)
    questions = [
        Question("a:1", "q?", ("Paris", "Hamlet")),
        Question("a:2", "q?", ("speare",)),
        Question("a:3", "q?", ("Oslo",)),
        Question("a:4", "q?", ("Denmark",)),
    ]
    assert coverage(questions, index) == (0.75, 0.5)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_file_stats_and_the_cli(tmp_path: Path) -> None:
    docs = [{"id": str(i), "contents": p} for i, p in enumerate(PASSAGES)]
    corpus = _write(tmp_path / "corpus.jsonl", docs)
    qa = _write(
        tmp_path / "toy.jsonl",
        [
            {"id": "1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]},
            {"id": "2", "question": "Where?", "golden_answers": ["Oslo", "Kristiania"], "hops": 2},
        ],
    )
    [row] = file_stats([qa], corpus)
    assert (row.rows, row.hops, row.substring, row.whole_word) == (2, {2: 1}, 0.5, 0.5)
    assert row.answers_per_question == 1.5
    runner = CliRunner()
    result = runner.invoke(app, ["data", "stats", str(qa), "--corpus", str(corpus)])
    assert result.exit_code == 0, result.output
    assert "50.0%" in result.output
    result = runner.invoke(app, ["data", "list"])
    assert result.exit_code == 0 and "2wikimultihopqa" in result.output


def test_convert_round_trip_through_the_cli(tmp_path: Path) -> None:
    src = _write(
        tmp_path / "nq.jsonl",
        [{"id": "0", "question": "who?", "golden_answers": ["a"], "metadata": {"x": 1}}],
    )
    runner = CliRunner()
    for args in (["nq.jsonl", "nq.parquet"], ["nq.parquet", "back.jsonl"]):
        paths = [str(tmp_path / a) for a in args]
        result = runner.invoke(app, ["data", "convert", *paths, "--split", "test"])
        assert result.exit_code == 0, result.output
    assert load_flashrag_jsonl(tmp_path / "back.jsonl", "nq") == load_flashrag_jsonl(src)
    bad = runner.invoke(app, ["data", "convert", str(src), str(tmp_path / "x.csv")])
    assert bad.exit_code != 0


def test_world_cli_writes_files(tmp_path: Path) -> None:
    args = ["world", "--seed", "3", "--preset", "test", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "train_questions=20"])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    assert len(lines) == 20
    assert json.loads((tmp_path / "manifest.json").read_text())["config"]["seed"] == 3
