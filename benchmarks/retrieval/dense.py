"""Dense encoding engines side by side: passages/s and what quantization costs in recall.

    taskset -c 1 python benchmarks/retrieval/dense.py --corpus \
        ../shared/data/corpus/wiki_paragraphs.jsonl \
        --passages 3000 --threads 1

Encodes the first `--passages` passages with each engine (the embedded MiniLM): torch fp32
(sentence-transformers, the old path), torch bf16 autocast (only where the CPU has native
bf16), CTranslate2 float32 and int8. Rates are given per wall second and per CPU second of the
process (user + system, from getrusage): on a shared machine the second does not depend on
what the other processes do. Each engine then builds an exact (flat) index and answers the QA
questions whose golden answer occurs in some passage of the slice, encoded by the same engine:

- recall@3 (answers): share of those questions with a golden answer in a top-3 passage;
- top-3 overlap: |top-3 ∩ top-3 of torch fp32| / 3, i.e. recall@3 against fp32 exact search.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import resource
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from searchrl.config.retrieval import DenseConfig
from searchrl.models.precision import cpu_has_fast_bf16
from searchrl.retrieval.dense import encode_texts, load_encoder


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def answerable(passages: list[str], pattern: str, limit: int, seed: int) -> list[tuple[str, list]]:
    """QA questions (shuffled) whose golden answer occurs in some passage of the slice."""
    text = "\n".join(p.lower() for p in passages)
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as handle:
            rows.extend(json.loads(line) for line in handle)
    random.Random(seed).shuffle(rows)
    kept = []
    for row in rows:
        answers = [a for a in row["golden_answers"] if len(a) > 3]
        if answers and any(a.lower() in text for a in answers):
            kept.append((row["question"], answers))
        if len(kept) == limit:
            break
    return kept


def run_engine(name: str, config: DenseConfig, passages: list[str], queries: list[str]) -> dict:
    """Encode passages and queries with one engine; vectors and rates."""
    bf16 = name.endswith("bf16 autocast")
    encoder = load_encoder(config)
    encode_texts(encoder, config, passages[:8], passages=True)  # warm-up
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.no_grad()
    with context:
        wall, cpu = time.perf_counter(), cpu_seconds()
        vectors = encode_texts(encoder, config, passages, passages=True)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        query_vectors = encode_texts(encoder, config, queries, passages=False)
    return {"name": name, "vectors": vectors, "queries": query_vectors, "wall": wall, "cpu": cpu}


def top3(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index.search(queries, 3)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument(
        "--qa", default=str(Path(__file__).resolve().parents[3] / "shared/data/qa/*.jsonl")
    )
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with args.corpus.open() as handle:
        passages = [
            json.loads(line)["contents"]
            for _, line in zip(range(args.passages), handle, strict=False)
        ]
    questions = answerable(passages, args.qa, args.questions, seed=0)
    base = DenseConfig(torch_threads=args.threads)
    engines = {"torch fp32": replace(base, engine="torch")}
    if cpu_has_fast_bf16():
        engines["torch bf16 autocast"] = replace(base, engine="torch")
    engines["ct2 float32"] = replace(base, engine="ct2", ct2_compute_type="float32")
    engines["ct2 int8"] = replace(base, engine="ct2", ct2_compute_type="int8")
    print(f"{len(passages)} passages, {len(questions)} answerable questions, "
          f"{args.threads} thread(s), native bf16: {cpu_has_fast_bf16()}")  # fmt: skip
    results = []
    for name, config in engines.items():
        results.append(run_engine(name, config, passages, [q for q, _ in questions]))
        print(f"  {name}: {len(passages) / results[-1]['wall']:.1f} passages/s", flush=True)
    reference = top3(results[0]["vectors"], results[0]["queries"])
    print("\n| engine | passages/s (wall) | passages / CPU s | vs torch fp32 (CPU) "
          "| recall@3 (answers) | top-3 overlap with fp32 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for result in results:
        ids = top3(result["vectors"], result["queries"])
        found = sum(
            any(a.lower() in " ".join(passages[i].lower() for i in row) for a in answers)
            for row, (_, answers) in zip(ids, questions, strict=True)
        )
        overlap = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(ids, reference, strict=True)])
        speedup = results[0]["cpu"] / result["cpu"]
        print(f"| {result['name']} | {len(passages) / result['wall']:.1f} | "
              f"{len(passages) / result['cpu']:.1f} | {speedup:.2f} | "
              f"{found / len(questions):.3f} | {overlap:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
