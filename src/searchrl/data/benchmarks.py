"""The seven QA benchmarks of the papers and loaders for the formats they circulate in.

Formats: FlashRAG JSONL (`{"id", "question", "golden_answers"}`), Search-R1 training parquet
(`data_source`, `prompt`, `reward_model.ground_truth.target`, `extra_info.index`) and the
FlashRAG collection on the Hugging Face Hub. Every loader returns `Question`s whose uid is
`"<source>:<id>"`, unique across sources: Search-R1 keyed groups by a row index that restarts
per source, which pooled two different questions into one GRPO group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from searchrl.types import Question
from searchrl.utils.errors import SearchRLError

HF_COLLECTION = "RUC-NLPIR/FlashRAG_datasets"
SPLIT_NAMES = ("train", "dev", "test", "validation")
_QUESTION_IN_PROMPT = re.compile(r"Question: (.*)$", re.DOTALL)
_MUSIQUE_HOPS = re.compile(r"^(\d)hop")


class DataError(SearchRLError, ValueError):
    """A data file or row is malformed; the message names the file and the row."""


@dataclass(frozen=True)
class Benchmark:
    """One evaluation set as the papers use it."""

    name: str
    eval_split: str
    """The split reported in the papers: test where it exists, else dev."""
    in_domain: bool
    """Whether its train split is in the paper's training mix (NQ, HotpotQA)."""
    multi_hop: bool
    """Multi-hop (HotpotQA, 2Wiki, MuSiQue, Bamboogle) or general QA (NQ, TriviaQA, PopQA)."""
    description: str

    @property
    def category(self) -> str:
        """ "multi-hop" or "general", the grouping of the papers' tables."""
        return "multi-hop" if self.multi_hop else "general"


BENCHMARKS = (
    Benchmark("nq", "test", True, False, "Natural Questions (open), Google queries"),
    Benchmark("triviaqa", "test", False, False, "TriviaQA trivia questions"),
    Benchmark("popqa", "test", False, False, "PopQA long-tail entity questions"),
    Benchmark("hotpotqa", "dev", True, True, "HotpotQA two-hop Wikipedia questions"),
    Benchmark("2wikimultihopqa", "dev", False, True, "2WikiMultiHopQA compositional questions"),
    Benchmark("musique", "dev", False, True, "MuSiQue 2-4 hop composed questions"),
    Benchmark("bamboogle", "test", False, True, "Bamboogle, 125 hand-written 2-hop questions"),
)


def benchmark(name: str) -> Benchmark:
    """The registry entry called `name`."""
    for bench in BENCHMARKS:
        if bench.name == name:
            return bench
    raise DataError(f"unknown benchmark {name!r}; known: {', '.join(b.name for b in BENCHMARKS)}")


def infer_source(path: Path) -> str:
    """`nq.jsonl` → nq; `nq/test.jsonl` (FlashRAG layout) → nq."""
    return path.parent.name if path.stem in SPLIT_NAMES else path.stem


def _hops(source: str, qid: str, row: dict[str, Any], where: str) -> int | None:
    """Hop count when the data states it (a `hops` field, or MuSiQue's `3hop1__…` ids)."""
    hops = row.get("hops")
    if hops is not None:
        if isinstance(hops, bool) or not isinstance(hops, (int, str)) or not str(hops).isdigit():
            raise DataError(f"{where}: 'hops' must be a whole number, got {hops!r}")
        return int(hops)
    match = _MUSIQUE_HOPS.match(qid) if source == "musique" else None
    return int(match.group(1)) if match else None


def question_from_row(row: Any, source: str, where: str) -> Question:
    """A FlashRAG-style row → Question; `where` ("file: row n") prefixes every error."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    qid, text, golds = row.get("id"), row.get("question"), row.get("golden_answers")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise DataError(f"{where}: missing or invalid 'id' ({qid!r})")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: missing or empty 'question'")
    if isinstance(golds, str):
        golds = [golds]
    if not isinstance(golds, list) or not golds or not all(isinstance(g, str) for g in golds):
        raise DataError(f"{where}: 'golden_answers' must be a non-empty list of strings")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be an object")
    return Question(
        uid=f"{source}:{qid}",
        question=text,
        golden_answers=tuple(golds),
        source=source,
        hops=_hops(source, str(qid), row, where),
        metadata=metadata,
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise DataError(f"{path}: row {number}: not UTF-8 text ({err.reason})") from err
            except json.JSONDecodeError as err:
                raise DataError(f"{path}: row {number}: invalid JSON ({err.msg})") from err


def load_flashrag_jsonl(path: str | Path, source: str | None = None) -> list[Question]:
    """A FlashRAG JSONL file; `source` defaults to the file (or its folder) name."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    source = source or infer_source(path)
    questions = [
        question_from_row(row, source, f"{path}: row {number}") for number, row in _jsonl_rows(path)
    ]
    _check_unique(questions, str(path))
    return questions


def _parquet_question(row: dict[str, Any], where: str) -> Question:
    source = row.get("data_source")
    if not isinstance(source, str) or not source:
        raise DataError(f"{where}: missing 'data_source'")
    try:
        target = row["reward_model"]["ground_truth"]["target"]
        index = row["extra_info"]["index"]
    except (KeyError, TypeError) as err:
        missing = "reward_model.ground_truth.target or extra_info.index"
        raise DataError(f"{where}: missing {missing}") from err
    prompt = _file_prompt(row.get("prompt"), where)
    question = row.get("question") or _question_from_prompt(row.get("prompt"), where)
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: 'metadata' is not valid JSON") from err
    flat = {
        "id": row.get("id") if row.get("id") is not None else index,
        "question": question,
        "golden_answers": list(target) if isinstance(target, (list, tuple)) else target,
        "hops": row.get("hops"),
        "metadata": metadata,
    }
    return replace(question_from_row(flat, source, where), prompt=prompt)


def _file_prompt(prompt: Any, where: str) -> str:
    """The user message of a row's `prompt` column (`[{"role": "user", "content": …}]`), or ""
    when the row has none. The chat template is applied later, as veRL applies it; a prompt of
    several messages is refused rather than cut to one."""
    if prompt is None:
        return ""
    if not isinstance(prompt, (list, tuple)) or len(prompt) != 1:
        count = len(prompt) if isinstance(prompt, (list, tuple)) else type(prompt).__name__
        raise DataError(f"{where}: 'prompt' must be one user message, got {count}")
    message = prompt[0]
    if not isinstance(message, dict) or message.get("role") != "user":
        raise DataError(f"{where}: 'prompt' must be one message with role 'user'")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise DataError(f"{where}: the prompt's message has no text")
    return content


def _question_from_prompt(prompt: Any, where: str) -> str:
    """The question text inside a Search-R1 prompt (`… Question: {question}\\n`)."""
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[-1], dict):
        raise DataError(f"{where}: no 'question' column and no usable 'prompt'")
    match = _QUESTION_IN_PROMPT.search(str(prompt[-1].get("content", "")))
    if not match or not match.group(1).strip():
        raise DataError(f"{where}: no 'Question: …' in the prompt")
    return match.group(1).strip()


def load_search_r1_parquet(path: str | Path) -> list[Question]:
    """A Search-R1 training/test parquet; the source of each row is its `data_source`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from err
    questions = [_parquet_question(row, f"{path}: row {i}") for i, row in enumerate(rows, 1)]
    _check_unique(questions, str(path))
    return questions


def load_hf_dataset(name: str, split: str | None = None) -> list[Question]:
    """A benchmark from the FlashRAG collection on the Hugging Face Hub (needs `datasets`)."""
    bench = benchmark(name)
    split = split or bench.eval_split
    try:
        import datasets
    except ImportError as err:
        raise DataError(
            f"loading {name!r} from the Hugging Face Hub needs the `datasets` package "
            "(pip install 'searchrl[hf]'); or pass a local FlashRAG JSONL / Search-R1 parquet file"
        ) from err
    rows = datasets.load_dataset(HF_COLLECTION, name, split=split)
    where = f"{HF_COLLECTION}/{name}/{split}"
    return [question_from_row(dict(r), name, f"{where}: row {i}") for i, r in enumerate(rows, 1)]


def load_questions(path: str | Path, source: str | None = None) -> list[Question]:
    """Any supported file, chosen by suffix (.jsonl/.json: FlashRAG, .parquet: Search-R1)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return load_search_r1_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return load_flashrag_jsonl(path, source)
    raise DataError(f"{path}: unknown format (expected .jsonl or .parquet)")


def load_benchmark(
    name: str, split: str | None = None, data_dir: str | Path | None = None
) -> list[Question]:
    """A registered benchmark from `data_dir` (`name/split.jsonl`, `name_split.jsonl`, or
    `name.jsonl` holding the eval split) or, without `data_dir`, from the Hub. A flat
    `name.jsonl` is never returned for another split, so dev data cannot leak into training."""
    bench = benchmark(name)
    split = split or bench.eval_split
    if data_dir is None:
        return load_hf_dataset(name, split)
    root = Path(data_dir)
    candidates = [root / name / f"{split}.jsonl", root / f"{name}_{split}.jsonl"]
    if split == bench.eval_split:
        candidates.append(root / f"{name}.jsonl")
    for candidate in candidates:
        if candidate.is_file():
            return load_flashrag_jsonl(candidate, name)
    tried = ", ".join(str(c) for c in candidates)
    raise DataError(f"{name} {split}: none of these files exists: {tried}")


def _check_unique(questions: Iterable[Question], where: str) -> None:
    seen: set[str] = set()
    for q in questions:
        if q.uid in seen:
            raise DataError(f"{where}: duplicate id {q.uid!r}")
        seen.add(q.uid)


def question_row(question: Question, keep_source: bool = False) -> dict[str, Any]:
    """A Question as a FlashRAG JSONL row; the id loses its `source:` prefix unless
    `keep_source` (needed when one file mixes sources whose ids may collide)."""
    qid = question.uid
    if not keep_source and ":" in qid:
        qid = qid.split(":", 1)[1]
    row: dict[str, Any] = {
        "id": qid,
        "question": question.question,
        "golden_answers": list(question.golden_answers),
    }
    if question.hops is not None:
        row["hops"] = question.hops
    if question.metadata:
        row["metadata"] = question.metadata
    return row


def write_flashrag_jsonl(questions: Iterable[Question], path: str | Path) -> None:
    """Write FlashRAG JSONL, one question per line. Ids keep their source prefix when the
    questions come from more than one source."""
    questions = list(questions)
    mixed = len({q.source for q in questions}) > 1
    with Path(path).open("w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(question_row(q, keep_source=mixed), ensure_ascii=False) + "\n")
