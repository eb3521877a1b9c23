"""The papers' Table 2 as a grid over evaluation folders: one row per (method, search engine,
model), EM per QA set with its 95% interval, the papers' "Avg." over the sets, general vs
multi-hop, SubEM's average, the world's EM (overall, 1-hop, multi-hop) and searches per
question. Rows of the same method and engine evaluated on different data (the world and the QA
sets are separate folders) are merged. `searchrl report` draws it as HTML,
`benchmarks/eval/baselines.py` as Markdown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.data.benchmarks import BENCHMARKS
from searchrl.eval.registry import METHODS
from searchrl.report.collect import Evaluation

SETS = tuple(b.name for b in BENCHMARKS)
WORLD = "world"
LABELS = {
    "nq": "NQ",
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
    "hotpotqa": "HotpotQA",
    "2wikimultihopqa": "2wiki",
    "musique": "Musique",
    "bamboogle": "Bamboogle",
}
COLUMNS = (
    *SETS,
    "avg",
    "general",
    "multi-hop",
    "subem avg",
    "world",
    "world 1-hop",
    "world multi-hop",
    "searches",
    "n",
)
HEADERS = {
    **LABELS,
    "avg": "Avg.",
    "subem avg": "SubEM Avg.",
    "world": "world",
    "world 1-hop": "world 1-hop",
    "world multi-hop": "world multi-hop",
    "searches": "searches / q",
    "n": "questions",
}

Estimate = dict[str, Any]


@dataclass
class GridRow:
    """One method with one search engine and one model, over whatever data it was run on."""

    method: str
    retriever: str
    model: str
    cells: dict[str, Estimate | str] = field(default_factory=dict)


def _qa_cells(summary: dict[str, Any]) -> dict[str, Estimate | str]:
    by_set = summary.get("by_set", {})
    cells: dict[str, Estimate | str] = {s: by_set[s]["em"] for s in SETS if s in by_set}
    covered = [s for s in SETS if s in by_set]
    if covered:
        cells["avg"] = summary["average"]["em"]
        cells["subem avg"] = summary["average"]["subem"]
        for name in ("general", "multi-hop"):
            block = summary.get("by_category", {}).get(name)
            if block:
                cells[name] = block["em"]
        cells["searches"] = f"{summary['overall']['searches']['mean']:.2f}"
        cells["n"] = str(sum(by_set[s]["n"] for s in covered))
    return cells


def _world_cells(summary: dict[str, Any]) -> dict[str, Estimate | str]:
    block = summary.get("by_set", {}).get(WORLD)
    if not block:
        return {}
    cells: dict[str, Estimate | str] = {"world": block["em"]}
    categories = summary.get("by_category", {})
    if len(summary.get("by_set", {})) == 1:  # categories of a world-only folder are its hops
        for name, column in (("general", "world 1-hop"), ("multi-hop", "world multi-hop")):
            if name in categories:
                cells[column] = categories[name]["em"]
    return cells


def grid_rows(evals: Sequence[Evaluation]) -> list[GridRow]:
    """Rows in the papers' method order, then by search engine (none, bm25, dense, …)."""
    rows: dict[tuple[str, str, str], GridRow] = {}
    for ev in evals:
        if not ev.summary:
            continue
        model = str(ev.summary.get("model", ""))
        key = (ev.method, ev.retriever, model)
        row = rows.setdefault(key, GridRow(ev.method, ev.retriever, model))
        world = _world_cells(ev.summary)
        qa = _qa_cells(ev.summary)
        if world and "n" in qa:
            qa.pop("n")  # a folder mixing the world with QA sets: count only the QA sets
        row.cells.update(world)
        row.cells.update(qa)
    order = {name: i for i, name in enumerate(METHODS)}
    engines = {"none": 0, "bm25": 1, "dense": 2, "hybrid": 3, "server": 4}
    return sorted(
        rows.values(),
        key=lambda r: (order.get(r.method, 99), engines.get(r.retriever, 9), r.retriever, r.model),
    )


def _text(cell: Estimate | str | None, bracket: Callable[[float, float], str]) -> str:
    if cell is None:
        return "–"
    if isinstance(cell, str):
        return cell
    if cell.get("mean") is None:
        return "–"
    return f"{cell['mean']:.3f} {bracket(cell['low'], cell['high'])}"


def _columns(rows: Sequence[GridRow]) -> list[str]:
    """The columns some row fills."""
    return [c for c in COLUMNS if any(c in r.cells for r in rows)]


def grid_markdown(evals: Sequence[Evaluation]) -> str:
    """The grid as a Markdown table (EM, 95% interval in brackets)."""
    rows = grid_rows(evals)
    if not rows:
        return "No evaluations.\n"
    columns = _columns(rows)
    header = ["method", "retriever", *(HEADERS.get(c, c) for c in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    bracket = lambda low, high: f"[{low:.2f}, {high:.2f}]"  # noqa: E731
    for row in rows:
        texts = [_text(row.cells.get(c), bracket) for c in columns]
        lines.append("| " + " | ".join([row.method, row.retriever, *texts]) + " |")
    return "\n".join(lines) + "\n"


def world_hops_markdown(evals: Sequence[Evaluation]) -> str:
    """The world's EM by hop count and its searches per question, one row per world
    evaluation (the grid's order): where one retrieval suffices and where a search policy
    is needed is a property of the hop count, which the grid's 1-hop / multi-hop split blurs."""
    rows = [e for e in evals if e.summary and list(e.summary.get("by_set", {})) == [WORLD]]
    rank = {(r.method, r.retriever, r.model): i for i, r in enumerate(grid_rows(rows))}
    rows.sort(key=lambda e: rank[(e.method, e.retriever, str(e.summary.get("model", "")))])
    found = {h for e in rows for h in e.summary.get("by_hops", {})}
    hops = sorted(found, key=lambda h: (not h.isdigit(), int(h) if h.isdigit() else 0, h))
    if not rows:
        return "No world evaluations.\n"
    header = ["method", "retriever", "questions", "EM", *(f"{h}-hop ({_hop_n(rows, h)})"
              for h in hops), "searches / q"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in rows:
        overall, by_hops = e.summary["overall"], e.summary.get("by_hops", {})
        em_all = overall["em"]
        em = f"{em_all['mean']:.3f} [{em_all['low']:.3f}, {em_all['high']:.3f}]"
        per_hop = [f"{by_hops[h]['em']['mean']:.2f}" if h in by_hops else "–" for h in hops]
        searches = f"{overall['searches']['mean']:.2f}"
        lines.append("| " + " | ".join([e.method, e.retriever, str(overall["n"]), em, *per_hop,
                                          searches]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _hop_n(rows: Sequence[Evaluation], hop: str) -> str:
    """The number of `hop`-hop questions: one number when every row has the same, else a range."""
    sizes = sorted({e.summary["by_hops"][hop]["n"] for e in rows if hop in e.summary["by_hops"]})
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"


def load_summaries(root: Path) -> list[Evaluation]:
    """Evaluation folders under `root` with their summary and run record only (no rows), for
    a grid of many large folders."""
    found = []
    for summary_path in sorted(root.glob("**/summary.json")):
        folder = summary_path.parent
        if not (folder / "samples.jsonl").is_file():
            continue
        run_path = folder / "run.json"
        run = json.loads(run_path.read_text()) if run_path.is_file() else {}
        summary = json.loads(summary_path.read_text())
        found.append(Evaluation(folder, folder.name, summary, [], run))
    return found
