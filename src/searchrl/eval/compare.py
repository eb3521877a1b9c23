"""Two evaluations on the same questions, compared pairwise (`searchrl eval compare A B`).

Only questions both runs answered are compared (their count and the number left out are
reported), per set, `overall` (questions pooled, so the biggest set weighs most) and, with two
or more sets, `average`: the papers' "Avg." (the unweighted mean over sets) with its own paired
test (`stats.macro_paired_test`). Each row is a `stats.PairedResult`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from searchrl.config.eval import EvalConfig
from searchrl.eval.stats import macro_paired_test, paired_test
from searchrl.eval.store import read_samples
from searchrl.eval.summary import set_order
from searchrl.utils.errors import SearchRLError
from searchrl.utils.output import atomic_file

Row = dict[str, Any]


class NotAnEvaluation(SearchRLError, FileNotFoundError):
    """A folder given as an evaluation holds no `samples.jsonl`."""


def load_rows(folder: Path) -> list[Row]:
    """The rows of an evaluation folder (`samples.jsonl`)."""
    path = folder / "samples.jsonl"
    if not path.is_file():
        raise NotAnEvaluation(f"{folder} is not an evaluation folder (no samples.jsonl)")
    return read_samples(path)


def paired_rows(first: list[Row], second: list[Row]) -> tuple[list[tuple[Row, Row]], int]:
    """(A row, B row) for every id in both, in A's order; plus how many ids are in only one."""
    by_id = {r["id"]: r for r in second}
    pairs = [(a, by_id[a["id"]]) for a in first if a["id"] in by_id]
    unmatched = len(first) + len(second) - 2 * len(pairs)
    return pairs, unmatched


def compare_pairs(
    pairs: list[tuple[Row, Row]],
    metric: str,
    resamples: int = EvalConfig.bootstrap_resamples,
    confidence: float = EvalConfig.confidence,
) -> dict[str, Any]:
    """Paired results per set (papers' order), `overall` and, over two or more sets,
    `average` (the papers' "Avg.")."""
    groups: dict[str, list[tuple[Row, Row]]] = defaultdict(list)
    for pair in pairs:
        groups[pair[0]["set"]].append(pair)
    rows: dict[str, Any] = {}
    for name in sorted(groups, key=set_order):
        rows[name] = _paired(groups[name], metric, resamples, confidence)
    if pairs:
        rows["overall"] = _paired(pairs, metric, resamples, confidence)
    if len(groups) > 1:
        per_set = [_scores(groups[name], metric) for name in sorted(groups, key=set_order)]
        rows["average"] = macro_paired_test(per_set, resamples, confidence, seed=0).to_json()
    return rows


def _scores(pairs: list[tuple[Row, Row]], metric: str) -> tuple[list[float], list[float]]:
    a = [float(x.get(metric) or 0.0) for x, _ in pairs]
    b = [float(y.get(metric) or 0.0) for _, y in pairs]
    return a, b


def _paired(
    pairs: list[tuple[Row, Row]], metric: str, resamples: int, confidence: float
) -> dict[str, Any]:
    return paired_test(*_scores(pairs, metric), resamples, confidence, seed=0).to_json()


def compare_runs(first: Path, second: Path, metric: str = "em") -> dict[str, Any]:
    """A vs B from two evaluation folders."""
    pairs, unmatched = paired_rows(load_rows(first), load_rows(second))
    return {
        "a": str(first),
        "b": str(second),
        "metric": metric,
        "unmatched": unmatched,
        "rows": compare_pairs(pairs, metric),
    }


def write_json(result: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write a result whole or not at all; an existing file is replaced only with `force`."""
    with atomic_file(path, force=force) as handle:
        handle.write(json.dumps(result, indent=2) + "\n")  # type: ignore[arg-type]
