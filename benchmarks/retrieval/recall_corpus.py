"""The real-text corpus the dense sweep measures recall on, encoded once and cached.

    nohup nice -n 19 python benchmarks/retrieval/recall_corpus.py --work \
        runs/retrieval/recall &

wiki-18 itself is not on this machine; the real Wikipedia slice is 34,917 passages. To reach
more than 200,000 passages of text encoded for real (not synthetic vectors), the corpus is
those passages plus the passages of one synthetic world (`searchrl.data.world`, one seed, no
name repeats) rendered as text and encoded by the same embedded MiniLM. Questions: NQ-open dev
(answers in the Wikipedia part) and the world's test questions (answers in the world part).

Stages, each resumable (a finished file is never redone, vectors are written in parts):

    corpus.jsonl      Wikipedia rows then world rows, ids "0".."N-1"
    questions.jsonl   {"question", "golden_answers", "source"}
    vectors/part-*.npy  float32 unit vectors, `--part` rows each
    queries.npy       the questions' vectors
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from searchrl.config.data import WorldConfig
from searchrl.config.retrieval import DenseConfig
from searchrl.data.world import generate_world
from searchrl.retrieval.dense import encode_texts, load_encoder
from searchrl.utils.progress import progress_bar

SHARED = Path(
    os.environ.get("SEARCHRL_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared/data")
)
"""The shared QA data and Wikipedia slice (README: ../shared/data next to the checkout)."""


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    tmp.replace(path)


def _save(path: Path, array: np.ndarray) -> None:
    """np.save to exactly `path` (given a name, np.save would append ".npy" to it)."""
    with path.open("wb") as handle:
        np.save(handle, array)


def build_corpus(work: Path, entities: int, world_questions: int, seed: int) -> None:
    """Write corpus.jsonl and questions.jsonl unless both exist."""
    corpus, questions = work / "corpus.jsonl", work / "questions.jsonl"
    if corpus.exists() and questions.exists():
        return
    wiki = [
        json.loads(line)["contents"] for line in (SHARED / "corpus/wiki_paragraphs.jsonl").open()
    ]
    config = WorldConfig(
        seed=seed,
        num_entities=entities,
        train_questions=0,
        dev_questions=0,
        test_questions=world_questions,
    )
    world = generate_world(config)
    texts = wiki + [p.document.contents for p in world.passages]

    def write_corpus(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            for i, text in enumerate(texts):
                handle.write(
                    json.dumps({"id": str(i), "contents": text}, ensure_ascii=False) + "\n"
                )

    def write_questions(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            for line in (SHARED / "qa/nq.jsonl").open():
                row = json.loads(line)
                keep = {"question": row["question"], "golden_answers": row["golden_answers"]}
                handle.write(json.dumps({**keep, "source": "nq"}) + "\n")
            for q in world.questions["test"]:
                keep = {"question": q.question, "golden_answers": list(q.golden_answers)}
                handle.write(json.dumps({**keep, "source": "world"}) + "\n")

    _atomic_write(corpus, write_corpus)
    _atomic_write(questions, write_questions)
    print(f"corpus: {len(wiki):,} Wikipedia + {len(world.passages):,} world passages")


def _texts(path: Path, start: int, stop: int) -> Iterator[str]:
    with path.open() as handle:
        for i, line in enumerate(handle):
            if i >= stop:
                return
            if i >= start:
                yield json.loads(line)["contents"]


def encode(work: Path, part: int, threads: int) -> None:
    """Encode corpus.jsonl into vectors/part-*.npy (skipping finished parts), then queries."""
    config = DenseConfig(torch_threads=threads)
    rows = sum(1 for _ in (work / "corpus.jsonl").open())
    out = work / "vectors"
    out.mkdir(exist_ok=True)
    starts = list(range(0, rows, part))
    todo = [s for s in starts if not (out / f"part-{s // part:05d}.npy").exists()]
    done = rows - sum(min(part, rows - s) for s in todo)
    encoder = None
    with progress_bar("encoding", rows, unit="passages", completed=done) as step:
        for start in todo:
            encoder = encoder or load_encoder(config)
            texts = list(_texts(work / "corpus.jsonl", start, start + part))
            vectors = encode_texts(encoder, config, texts, passages=True)
            _atomic_write(out / f"part-{start // part:05d}.npy", lambda t, v=vectors: _save(t, v))
            step(len(texts))
            print(f"encoded rows {start:,}..{start + len(texts):,} of {rows:,}", flush=True)
    if not (work / "queries.npy").exists():
        encoder = encoder or load_encoder(config)
        questions = [json.loads(line)["question"] for line in (work / "questions.jsonl").open()]
        vectors = encode_texts(encoder, config, questions, passages=False)
        _atomic_write(work / "queries.npy", lambda t: _save(t, vectors))


def load_vectors(work: Path) -> np.ndarray:
    """All passage vectors in row order (float32, one array)."""
    parts = sorted((work / "vectors").glob("part-*.npy"))
    return np.concatenate([np.load(p) for p in parts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--entities", type=int, default=80_000)
    parser.add_argument("--world-questions", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--part", type=int, default=16_384)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    build_corpus(args.work, args.entities, args.world_questions, args.seed)
    encode(args.work, args.part, args.threads)


if __name__ == "__main__":
    main()
