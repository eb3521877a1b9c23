"""The Table 2 grid: one row per (method, search engine, model), the world folder and the QA
folder of one method merged, EM with its interval per set, the papers' Avg., the categories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.eval.summary import summarize
from searchrl.report.collect import Evaluation
from searchrl.report.grid import grid_markdown, grid_rows, load_summaries, world_hops_markdown
from searchrl.report.page import grid_section

SEVEN = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def _rows(sets: dict[str, list[float]], hops: int | None = None) -> list[dict]:
    rows = []
    for name, ems in sets.items():
        for i, em in enumerate(ems):
            rows.append({"id": f"{name}:{i}", "set": name, "em": em, "f1": em, "subem": em,
                         "searches": 1, "turns": 2, "tokens": 10, "latency": 0.1,
                         "hops": hops if hops is not None else 1 + i % 3})  # fmt: skip
    return rows


def _evaluation(
    tmp: Path, name: str, method: str, kind: str | None, rows: list[dict]
) -> Evaluation:
    summary = summarize(rows, 100, 0.95)
    summary.update(method=method, model="embedded")
    run = {"method": method, "retriever": None if kind is None else {"kind": kind, "index": "x"}}
    folder = tmp / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "run.json").write_text(json.dumps(run))
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Evaluation(folder, name, summary, rows, run)


@pytest.fixture
def evals(tmp_path: Path) -> list[Evaluation]:
    qa = {name: [1.0] * i + [0.0] * (10 - i) for i, name in enumerate(SEVEN)}
    return [
        _evaluation(tmp_path, "wiki-bm25-rag", "rag", "bm25", _rows(qa)),
        _evaluation(tmp_path, "world-bm25-rag", "rag", "bm25", _rows({"world": [1, 0, 0, 0]})),
        _evaluation(tmp_path, "wiki-dense-rag", "rag", "dense", _rows({"nq": [0.0] * 5})),
        _evaluation(tmp_path, "world-none-direct", "direct", None, _rows({"world": [0.0] * 4})),
    ]


def test_rows_merge_data_and_follow_the_papers_order(evals: list[Evaluation]) -> None:
    rows = grid_rows(evals)
    assert [(r.method, r.retriever) for r in rows] == [
        ("direct", "none"), ("rag", "bm25"), ("rag", "dense")]  # fmt: skip
    rag = rows[1].cells
    assert rag["nq"]["mean"] == 0.0 and rag["bamboogle"]["mean"] == pytest.approx(0.6)
    assert rag["avg"]["mean"] == pytest.approx(sum(range(7)) / 70)  # mean of the 7 set means
    assert rag["general"]["mean"] == pytest.approx(3 / 30)  # nq, triviaqa, popqa
    assert rag["world"]["mean"] == 0.25 and rag["n"] == "70"
    assert rag["nq"]["high"] > 0  # Wilson: a set at 0 still has an upper bound
    assert "world 1-hop" in rag and "world multi-hop" in rag
    assert "avg" not in rows[0].cells and rows[0].cells["world"]["mean"] == 0.0


def test_markdown_and_html(evals: list[Evaluation], tmp_path: Path) -> None:
    table = grid_markdown(evals)
    header, rule, *lines = table.strip().splitlines()
    assert header.startswith("| method | retriever | NQ | TriviaQA |") and "Avg." in header
    assert len(lines) == 3 and lines[1].startswith("| rag | bm25 | 0.000 [0.00, 0.28]")
    assert len(rule.split("|")) == len(header.split("|"))
    html = grid_section(evals)
    assert 'class="grid-table"' in html and html.count("<tr>") == 4
    assert [e.path.name for e in load_summaries(tmp_path)] == sorted(e.path.name for e in evals)
    assert grid_markdown(load_summaries(tmp_path)) == table  # summaries alone are enough


def test_world_by_hops(evals: list[Evaluation]) -> None:
    header, _, *lines = world_hops_markdown(evals).strip().splitlines()
    # world-only folders, the grid's method order; hop sizes from the rows (hops 1, 2, 3, 1)
    assert header == ("| method | retriever | questions | EM | 1-hop (2) | 2-hop (1) | 3-hop (1) "
                      "| searches / q |")  # fmt: skip
    assert [line.split(" | ")[:3] for line in lines] == [["| direct", "none", "4"],
                                                         ["| rag", "bm25", "4"]]  # fmt: skip
    assert lines[1].split(" | ")[4:7] == ["0.50", "0.00", "0.00"]  # 1-hop: one right of two
    assert lines[1].startswith("| rag | bm25 | 4 | 0.250 [") and lines[1].endswith(" | 1.00 |")
    assert world_hops_markdown(evals[:1]) == "No world evaluations.\n"
