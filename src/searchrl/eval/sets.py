"""The questions `searchrl eval --data` names: files, folders of files, FlashRAG-layout roots and
the FlashRAG collection on the Hub, the first `limit` of each set.

A FlashRAG root holds one folder per set with its split files (`nq/train.jsonl`,
`nq/dev.jsonl`, `nq/test.jsonl`); only the split the papers report is evaluated: the set's
`eval_split` for the seven benchmarks (test for NQ, TriviaQA, PopQA and Bamboogle; dev for
HotpotQA, 2Wiki and MuSiQue, which FlashRAG uses as their test sets), else test, then dev.
A train split is never read as test questions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from searchrl.data.benchmarks import (
    BENCHMARKS,
    SPLIT_NAMES,
    DataError,
    load_hf_dataset,
    load_questions,
)
from searchrl.data.sources import load_spec, parse_spec
from searchrl.types import Question

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
EVAL_SPLITS = ("test", "dev", "validation")
"""Splits that may be evaluated, in order of preference for a set the registry does not know."""


def load_sets(sources: Sequence[str], limit: int) -> list[Question]:
    """Questions of every source, the first `limit` of each set (0 = all): a file (FlashRAG
    JSONL, Search-R1 parquet, a world split) or its rows `FILE[a:b]`, a folder of such files,
    one set's FlashRAG folder, a FlashRAG root of such folders, or `hf:NAME[:SPLIT]` (where
    the Hub is reachable)."""
    questions: list[Question] = []
    for source in sources:
        for loaded in _load_source(source):
            by_set: dict[str, list[Question]] = {}
            for q in loaded:
                by_set.setdefault(q.source, []).append(q)
            for group in by_set.values():
                questions.extend(group[:limit] if limit > 0 else group)
    seen: set[str] = set()
    for q in questions:
        if q.uid in seen:
            raise DataError(f"question {q.uid!r} is given twice (the same set twice?)")
        seen.add(q.uid)
    return questions


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES)


def _is_split_file(path: Path) -> bool:
    return path.stem in SPLIT_NAMES


def eval_split_file(folder: Path) -> Path:
    """The file of a set's FlashRAG folder that holds the split the papers evaluate on."""
    known = {b.name: b.eval_split for b in BENCHMARKS}
    order = [known[folder.name]] if folder.name in known else []
    order += [s for s in EVAL_SPLITS if s not in order]
    files = {p.stem: p for p in _data_files(folder) if _is_split_file(p)}
    for split in order:
        if split in files:
            return files[split]
    have = ", ".join(sorted(files)) or "no split files"
    raise DataError(
        f"{folder}: no {' or '.join(order)} split to evaluate ({have}); "
        "train questions are never evaluated as test questions"
    )


def _load_source(source: str) -> Iterator[list[Question]]:
    spec = parse_spec(source)
    if spec.start is not None or spec.stop is not None:  # `FILE[a:b]`: rows a..b-1
        yield load_spec(spec, "test")
        return
    if source.startswith("hf:"):
        name, _, split = source[3:].partition(":")
        yield load_hf_dataset(name, split or None)
        return
    path = Path(source)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if not path.is_dir():
        yield load_questions(path)
        return
    files = _data_files(path)
    if any(_is_split_file(p) for p in files):  # one set's FlashRAG folder
        yield load_questions(eval_split_file(path))
        return
    set_folders = sorted(
        d for d in path.iterdir() if d.is_dir() and any(_is_split_file(p) for p in _data_files(d))
    )
    if not files and not set_folders:
        raise DataError(f"{path}: no .jsonl or .parquet files, and no set folders of split files")
    for file in files:
        yield load_questions(file)
    for folder in set_folders:
        yield load_questions(eval_split_file(folder))
