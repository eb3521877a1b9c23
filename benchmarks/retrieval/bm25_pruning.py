"""BM25's MaxScore pruning against the full sparse product on one index: identical top k (ids
and scores), queries/s of each, and the per-query latency of the pruned path.

    python benchmarks/retrieval/bm25_pruning.py --index runs/retrieval/scale/1000000/bm25 \\
        --questions runs/retrieval/scale/1000000/corpus/questions.jsonl --queries 300

`--index` is any BM25 index directory (`searchrl index --kind bm25`); `--questions` a JSONL
file with a "question" field per line (the scale benchmark's world questions, or a FlashRAG
split). Both retrievers read the same memory-mapped files; one warm-up batch runs first.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from searchrl.config.retrieval import BM25Config
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.bm25_topk import pruned_top_k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    lines = args.questions.read_text().splitlines()[: args.queries]
    questions = [json.loads(line)["question"] for line in lines if line.strip()]
    full = BM25Retriever.load(args.index, BM25Config(prune_above=10**12))
    pruned = BM25Retriever.load(args.index, BM25Config(prune_above=0))
    pruned.search(questions[:20], args.k)  # page in the vocabulary and the first lists
    timed = {}
    results = {}
    for name, retriever in (("full product", full), ("pruned", pruned)):
        started = time.perf_counter()
        results[name] = retriever.search(questions, args.k)
        timed[name] = len(questions) / (time.perf_counter() - started)
    same = sum(
        [(h.document.id, h.score) for h in a] == [(h.document.id, h.score) for h in b]
        for a, b in zip(results["full product"], results["pruned"], strict=True)
    )
    latency, fallbacks = [], 0
    for terms, weights in pruned._query_terms(questions):
        started = time.perf_counter()
        fallbacks += pruned_top_k(pruned._lists, terms, weights, args.k) is None
        latency.append(time.perf_counter() - started)
    ms = np.array(latency) * 1e3
    print(f"{len(questions)} questions, top {args.k}, {len(pruned.docs):,} passages")
    print("| search | queries/s (one batch) |\n|---|---:|")
    for name, qps in timed.items():
        print(f"| {name} | {qps:,.1f} |")
    print(f"identical top {args.k} (ids and scores): {same}/{len(questions)}")
    print(
        f"pruned, one query at a time: {len(ms) / ms.sum() * 1e3:,.0f} queries/s, median "
        f"{np.median(ms):.1f} ms, 90th pct {np.percentile(ms, 90):.1f} ms, slowest "
        f"{ms.max():.0f} ms; {fallbacks} questions went to the product"
    )


if __name__ == "__main__":
    main()
