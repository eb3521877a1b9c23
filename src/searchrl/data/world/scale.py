"""Corpora of any size — 1M, 5M, 21M passages (wiki-18's size) — made of synthetic worlds,
with questions whose answers and supporting passages are known, for retrieval at scale.

One `generate_world` holds its whole world in memory, so a large corpus is written block by
block: block b is an independent world of `block_entities` entities seeded by (seed, b), its
passages renumbered after the previous blocks'. Memory stays at one block (~0.5 GB); the same
arguments always give the same bytes. Names are unique inside a block, not across blocks:
like namesakes in Wikipedia, two blocks may both have a "Stafei Fitrousk" with different
facts, so a question's gold passages are given by id (`gold_ids`), not only by answer string.

Files in `out`:

    corpus.jsonl     {"id": "<row>", "contents": "\\"Title\\"\\ntext"} (the wiki-18 format)
    questions.jsonl  {"id", "question", "golden_answers", "gold_ids", "hops"}
    manifest.json    arguments, passage and question counts; written last (= complete)
    .state.json      blocks done and file sizes, so an interrupted run resumes where it was
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from searchrl.config.data import WorldConfig
from searchrl.data.world import generate_world

STATE_FILE = ".state.json"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class ScaleCorpus:
    """What to generate (recorded in the manifest)."""

    passages: int
    seed: int = 0
    block_entities: int = 50_000
    questions_per_block: int = 40
    sentences_per_passage: int = 6
    """wiki-18 passages are ~100 words; world passages of 6 sentences are ~45 words, a
    compromise between realism and disk (21M × ~300 bytes per copy of the corpus)."""


def _block_config(spec: ScaleCorpus, block: int) -> WorldConfig:
    return WorldConfig(
        seed=spec.seed * 1_000_003 + block,
        num_entities=spec.block_entities,
        sentences_per_passage=spec.sentences_per_passage,
        train_questions=0,
        dev_questions=0,
        test_questions=spec.questions_per_block,
    )


def _read_state(out: Path) -> dict[str, Any]:
    path = out / STATE_FILE
    if path.exists():
        return json.loads(path.read_text())
    return {"blocks": 0, "rows": 0, "questions": 0, "corpus_bytes": 0, "question_bytes": 0}


def write_scale_corpus(
    spec: ScaleCorpus, out: Path, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Generate (or finish generating) the corpus in `out`; returns the manifest. An
    existing complete corpus with the same spec is returned as it is."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST_FILE
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest["spec"] == asdict(spec):
            return manifest
        raise ValueError(f"{out} holds a corpus of another spec: {manifest['spec']}")
    state = _read_state(out)
    if state.get("spec", asdict(spec)) != asdict(spec):
        raise ValueError(f"{out} holds a partial corpus of another spec: {state['spec']}")
    corpus_path, questions_path = out / "corpus.jsonl", out / "questions.jsonl"
    sizes = {corpus_path: state["corpus_bytes"], questions_path: state["question_bytes"]}
    for path, size in sizes.items():
        with path.open("ab") as handle:
            handle.truncate(size)  # drop whatever a killed run wrote after its last block
    if progress is not None and state["rows"]:
        progress(state["rows"])
    with corpus_path.open("ab") as corpus, questions_path.open("ab") as questions:
        while state["rows"] < spec.passages:
            world = generate_world(_block_config(spec, state["blocks"]))
            first = state["rows"]
            take = min(len(world.passages), spec.passages - first)
            for i, passage in enumerate(world.passages[:take]):
                row = {"id": str(first + i), "contents": passage.document.contents}
                corpus.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
            for question in world.questions["test"]:
                support = question.metadata["support"]
                gold = sorted({first + int(pid) for hop in support for pid in hop})
                if gold and gold[-1] < first + take:
                    row = {
                        "id": f"scale-{state['questions']}",
                        "question": question.question,
                        "golden_answers": list(question.golden_answers),
                        "gold_ids": [str(g) for g in gold],
                        "hops": question.hops,
                    }
                    questions.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
                    state["questions"] += 1
            corpus.flush()
            questions.flush()
            state.update(
                blocks=state["blocks"] + 1,
                rows=first + take,
                corpus_bytes=corpus.tell(),
                question_bytes=questions.tell(),
                spec=asdict(spec),
            )
            tmp = out / f"{STATE_FILE}.tmp"
            tmp.write_text(json.dumps(state))
            tmp.replace(out / STATE_FILE)
            if progress is not None:
                progress(take)
    manifest = {
        "spec": asdict(spec),
        "passages": state["rows"],
        "questions": state["questions"],
        "blocks": state["blocks"],
        "corpus_bytes": state["corpus_bytes"],
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    (out / STATE_FILE).unlink()
    return manifest
