"""Per-file statistics of QA data: sizes, question and answer lengths, hop counts, and the
share of questions with a golden answer somewhere in a corpus (substring and whole word)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from searchrl.data.benchmarks import DataError, load_questions
from searchrl.data.coverage import CorpusIndex
from searchrl.types import Question

REPORT_BYTES = 1 << 20
"""Bytes read between progress reports (a report per line would cost more than the line)."""


@dataclass(frozen=True)
class QAStats:
    """Summary of one QA file (coverage fields are None without a corpus)."""

    name: str
    rows: int
    question_words: float
    answers_per_question: float
    answer_words: float
    hops: dict[int, int] = field(default_factory=dict)
    substring: float | None = None
    whole_word: float | None = None


def load_corpus_index(
    path: str | Path, progress: Callable[[int], None] | None = None
) -> CorpusIndex:
    """Index a corpus JSONL (`{"id", "contents"}` per line) for answer lookups; `progress`
    hears the bytes read so far (a wiki-sized corpus takes minutes)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"corpus file not found: {path}")
    texts = []
    unreported = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            unreported += len(line)
            if progress is not None and unreported >= REPORT_BYTES:
                progress(unreported)
                unreported = 0
            if not line.strip():
                continue
            try:
                texts.append(json.loads(line)["contents"])
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
                raise DataError(f"{path}: row {number}: not a corpus row ({err})") from err
    if progress is not None and unreported:
        progress(unreported)
    return CorpusIndex(texts)


def coverage(questions: Sequence[Question], index: CorpusIndex) -> tuple[float, float]:
    """Shares of questions with at least one golden answer in the corpus: (substring, whole
    word). A whole-word hit implies a substring hit, so most questions need one lookup."""
    if not questions:
        return 0.0, 0.0
    substring = whole = 0
    for q in questions:
        if any(index.contains_whole_word(a) for a in q.golden_answers):
            substring, whole = substring + 1, whole + 1
        elif any(index.contains_substring(a) for a in q.golden_answers):
            substring += 1
    return substring / len(questions), whole / len(questions)


def qa_stats(name: str, questions: Sequence[Question], index: CorpusIndex | None) -> QAStats:
    """Statistics of one question list."""
    n = max(len(questions), 1)
    answers = [a for q in questions for a in q.golden_answers]
    hops = Counter(q.hops for q in questions if q.hops is not None)
    covered = coverage(questions, index) if index is not None else (None, None)
    return QAStats(
        name=name,
        rows=len(questions),
        question_words=sum(len(q.question.split()) for q in questions) / n,
        answers_per_question=len(answers) / n,
        answer_words=sum(len(a.split()) for a in answers) / max(len(answers), 1),
        hops=dict(sorted(hops.items())),
        substring=covered[0],
        whole_word=covered[1],
    )


def file_stats(
    paths: Sequence[str | Path],
    corpus: str | Path | None = None,
    *,
    index: CorpusIndex | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[QAStats]:
    """Statistics of each QA file, with corpus coverage when `corpus` (or an already built
    `index`) is given; `progress` hears each finished file."""
    if index is None and corpus is not None:
        index = load_corpus_index(corpus)
    results = []
    for p in paths:
        results.append(qa_stats(Path(p).stem, load_questions(p), index))
        if progress is not None:
            progress(1)
    return results
