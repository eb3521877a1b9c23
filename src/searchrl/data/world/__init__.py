"""A synthetic search world: an invented encyclopedia, multi-hop questions whose answers exist
only in it, and scripted reference trajectories that prove each question can be solved.

`generate_world(config)` is pure and deterministic for `config.seed`; `write_world` adds the
reference trajectories (which need a retriever) and writes everything as files.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.config.data import WorldConfig
from searchrl.config.loading import to_dict
from searchrl.data.benchmarks import question_row
from searchrl.data.world.entities import Entity, generate_entities
from searchrl.data.world.passages import Passage, write_passages
from searchrl.data.world.questions import SPLITS, generate_questions
from searchrl.data.world.solver import Reference, load_references, solve, write_references
from searchrl.retrieval.base import Retriever
from searchrl.types import Document, Question

__all__ = [
    "Reference",
    "World",
    "generate_world",
    "load_references",
    "solve",
    "solver_accuracy",
    "write_world",
]


@dataclass(frozen=True)
class World:
    """Everything generated for one seed."""

    config: WorldConfig
    entities: list[Entity]
    passages: list[Passage]
    questions: dict[str, list[Question]]
    """Split name ("train", "dev", "test") → questions."""

    @property
    def documents(self) -> list[Document]:
        """The corpus, in id order."""
        return [p.document for p in self.passages]


def generate_world(config: WorldConfig) -> World:
    """Entities, passages and questions; one `random.Random(config.seed)` drives it all, so
    the same config gives the same world. Time and memory grow linearly with its size."""
    rng = random.Random(config.seed)
    entities = generate_entities(config, rng)
    passages = list(write_passages(entities, config, rng))
    support: dict[tuple[int, str], list[str]] = defaultdict(list)
    for passage in passages:
        for fact in passage.facts:
            support[fact].append(passage.document.id)
    questions = generate_questions(entities, config, rng, support)
    return World(config, entities, passages, questions)


def solver_accuracy(references: Sequence[Reference]) -> dict[int, float]:
    """Exact match of the scripted solver per hop count."""
    by_hops: dict[int, list[float]] = defaultdict(list)
    for ref in references:
        by_hops[ref.hops].append(ref.em)
    return {h: sum(v) / len(v) for h, v in sorted(by_hops.items())}


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _default_retriever(documents: list[Document]) -> Retriever:
    # Imported here: building a BM25 index is the only reason this module needs bm25s.
    from searchrl.retrieval.bm25 import BM25Retriever

    return BM25Retriever.build(documents)


def write_world(
    world: World, out_dir: str | Path, retriever: Retriever | None = None
) -> dict[str, Any]:
    """Write corpus.jsonl, {train,dev,test}.jsonl, references_{split}.jsonl and manifest.json
    into `out_dir`. The references are searched with `retriever` (BM25 over the world's corpus
    when None). Returns the manifest (sizes and the solver's exact match per split and hop)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = world.documents
    _write_jsonl(out / "corpus.jsonl", [{"id": d.id, "contents": d.contents} for d in docs])
    retriever = retriever if retriever is not None else _default_retriever(docs)
    solver: dict[str, dict[str, float]] = {}
    for split in SPLITS:
        questions = world.questions[split]
        _write_jsonl(out / f"{split}.jsonl", [question_row(q) for q in questions])
        refs = solve(questions, retriever, world.config.reference_top_k)
        write_references(refs, out / f"references_{split}.jsonl")
        solver[split] = {str(h): em for h, em in solver_accuracy(refs).items()}
    manifest = {
        "config": to_dict(world.config),
        "entities": len(world.entities),
        "passages": len(docs),
        "questions": {s: len(world.questions[s]) for s in SPLITS},
        "solver_em_by_hops": solver,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
