"""Training mixes and the Search-R1 training parquet.

The paper trains on NQ train + HotpotQA train pooled and shuffled. Any other mix of sources or
files works the same way. Each question keeps its `"<source>:<id>"` uid, and a mix refuses
duplicate uids, so a GRPO group never pools two different questions (Search-R1 keyed groups by
`extra_info.index`, which restarts at 0 in every source).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from searchrl.config.data import MixConfig
from searchrl.data.benchmarks import (
    DataError,
    load_benchmark,
    load_flashrag_jsonl,
    load_questions,
    load_search_r1_parquet,
    question_row,
    write_flashrag_jsonl,
)
from searchrl.data.templates import search_r1_prompt
from searchrl.types import Question

ABILITY = "fact-reasoning"
"""The `ability` value of Search-R1's released parquet files."""


def mix_questions(
    groups: Iterable[Sequence[Question]], seed: int, max_per_source: int | None = None
) -> list[Question]:
    """Pool question lists (at most `max_per_source` of each, sampled with `seed`), then
    shuffle with `seed`. Raises DataError when two questions share a uid."""
    rng = random.Random(seed)
    pooled: list[Question] = []
    for group in groups:
        chosen = list(group)
        if max_per_source is not None and len(chosen) > max_per_source:
            chosen = rng.sample(chosen, max_per_source)
        pooled.extend(chosen)
    seen: dict[str, Question] = {}
    for q in pooled:
        if q.uid in seen:
            raise DataError(
                f"two questions share uid {q.uid!r} ({seen[q.uid].question!r} and "
                f"{q.question!r}); give each source its own name"
            )
        seen[q.uid] = q
    rng.shuffle(pooled)
    return pooled


def load_mix(
    config: MixConfig, data_dir: str | Path | None = None, files: Sequence[str | Path] = ()
) -> list[Question]:
    """The configured sources (from `data_dir`, or the Hub without it) plus any extra files,
    pooled and shuffled. `MixConfig()` is the paper's NQ train + HotpotQA train."""
    groups = [load_benchmark(name, config.split, data_dir) for name in config.sources]
    groups += [load_questions(path) for path in files]
    return mix_questions(groups, config.seed, config.max_per_source)


def search_r1_rows(
    questions: Iterable[Question], split: str, prompt: Callable[[str], str] = search_r1_prompt
) -> list[dict[str, Any]]:
    """Rows of Search-R1's training parquet. `extra_info.index` restarts per source, as in the
    original files; `id`, `question`, `golden_answers` (FlashRAG's columns, which the original
    files keep too), `hops` and `metadata` (JSON text) make the round trip lossless."""
    counters: dict[str, int] = {}
    rows = []
    for q in questions:
        index = counters.get(q.source, 0)
        counters[q.source] = index + 1
        flat = question_row(q)
        rows.append(
            {
                "id": str(flat["id"]),
                "question": q.question,
                "golden_answers": list(q.golden_answers),
                "data_source": q.source,
                "prompt": [{"role": "user", "content": prompt(q.question)}],
                "ability": ABILITY,
                "reward_model": {
                    "style": "rule",
                    "ground_truth": {"target": list(q.golden_answers)},
                },
                "extra_info": {"split": split, "index": index},
                "hops": q.hops,
                "metadata": json.dumps(q.metadata, ensure_ascii=False, sort_keys=True),
            }
        )
    return rows


def write_search_r1_parquet(
    questions: Iterable[Question],
    path: str | Path,
    split: str,
    prompt: Callable[[str], str] = search_r1_prompt,
) -> None:
    """Write the Search-R1 training parquet (read it back with `load_search_r1_parquet`)."""
    rows = search_r1_rows(questions, split, prompt)
    for row in rows:
        if not row["data_source"]:
            raise DataError(f"question {row['id']!r} has no source; Search-R1 rows need one")
    pq.write_table(pa.Table.from_pylist(rows), Path(path))


def convert(src: str | Path, dst: str | Path, split: str, source: str | None = None) -> int:
    """FlashRAG JSONL ↔ Search-R1 parquet, chosen by the suffixes; returns the row count.
    `split` fills `extra_info.split` of parquet rows; `source` names a JSONL file's source."""
    src, dst = Path(src), Path(dst)
    if src.suffix == ".jsonl" and dst.suffix == ".parquet":
        questions = load_flashrag_jsonl(src, source)
        write_search_r1_parquet(questions, dst, split)
    elif src.suffix == ".parquet" and dst.suffix == ".jsonl":
        questions = load_search_r1_parquet(src)
        write_flashrag_jsonl(questions, dst)
    else:
        raise DataError(f"convert {src.name} → {dst.name}: expected .jsonl ↔ .parquet")
    return len(questions)
