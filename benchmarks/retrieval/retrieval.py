"""Retrieval benchmark: index build time and size, queries/s and p50/p99 latency for batches of
1, 16 and 64 (in process and through the HTTP server), many concurrent clients against the
server, and recall@3 on the QA sets, for BM25 and dense.

    python benchmarks/retrieval/retrieval.py --corpus \
        ../shared/data/corpus/wiki_paragraphs.jsonl --scale 4

Dense encoding on a 2-core CPU is slow, so dense is measured on the first `--dense-limit`
passages of the (replicated) corpus; the table says how many. "server" rows go through
`RemoteRetriever`, the client training uses, so its cost (HTTP, JSON, building hits) counts.
Compare ratios within one run: the machine is shared and absolute numbers are noisy.
"""

from __future__ import annotations

import argparse
import glob
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import urllib3

from searchrl.config.retrieval import DenseConfig, RemoteConfig, RetrievalConfig
from searchrl.retrieval import (
    RemoteRetriever,
    RetrievalError,
    Retriever,
    build_index,
    load_index,
)
from searchrl.types import Hit

BATCHES = (1, 16, 64)
CONFIG = RetrievalConfig(dense=DenseConfig(torch_threads=1))
"""One torch thread: on 2 shared cores it encodes 3-5x faster than two (see DenseConfig)."""
SERVER = (
    "import sys\n"
    "from dataclasses import replace\n"
    "from searchrl.config.retrieval import DenseConfig, RetrievalConfig, ServerConfig\n"
    "from searchrl.retrieval.server import serve\n"
    "config = RetrievalConfig(dense=DenseConfig(torch_threads=1))\n"
    "serve(sys.argv[1], replace(config, server=ServerConfig(port=int(sys.argv[2]))))\n"
)


@dataclass
class Row:
    """One line of the results table."""

    retriever: str
    passages: int
    mode: str
    batch: int
    qps: float
    p50_ms: float
    p99_ms: float
    note: str = ""


def write_corpus(source: Path, out: Path, scale: int, limit: int | None) -> int:
    """Replicate `source` `scale` times under fresh ids (`id~r`), keeping the first `limit`."""
    rows = 0
    with out.open("w") as sink:
        for rep in range(scale):
            with source.open() as handle:
                for line in handle:
                    if limit is not None and rows >= limit:
                        return rows
                    row = json.loads(line)
                    row["id"] = row["id"] if rep == 0 else f"{row['id']}~{rep}"
                    sink.write(json.dumps(row, ensure_ascii=False) + "\n")
                    rows += 1
    return rows


def load_questions(pattern: str) -> list[tuple[str, list[str]]]:
    """(question, golden answers) from every QA file matching `pattern`."""
    questions = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                questions.append((row["question"], row["golden_answers"]))
    return questions


def percentiles(latencies: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    values = np.asarray(latencies) * 1000
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def timed_batches(
    search: Callable[[list[str]], object], queries: list[str], batch: int
) -> tuple[float, float, float]:
    """Run all queries in batches; returns queries/s and the p50/p99 latency of a batch."""
    latencies = []
    started = time.perf_counter()
    for start in range(0, len(queries), batch):
        t0 = time.perf_counter()
        search(queries[start : start + batch])
        latencies.append(time.perf_counter() - t0)
    qps = len(queries) / (time.perf_counter() - started)
    return (qps, *percentiles(latencies))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(index_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Serve the index in a separate process (so client and server do not share a GIL)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(index_dir), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if urllib3.request("GET", f"{url}/health", timeout=1, retries=False).status == 200:
                return process, url
        except urllib3.exceptions.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the benchmark server did not start")
        time.sleep(0.2)


def hammer(url: str, queries: list[str], clients: int, duration_s: float) -> Row:
    """`clients` threads, each with its own `RemoteRetriever` (own connection), searching one
    query at a time for `duration_s`; a failure is counted, not retried."""
    latencies: list[float] = []
    errors: list[int] = []
    stop = time.monotonic() + duration_s

    def client(offset: int) -> None:
        config = RemoteConfig(url=f"{url}/retrieve", timeout_s=60, retries=0)
        with RemoteRetriever(config) as session:
            i = offset
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    failed = len(session.search([queries[i % len(queries)]], 3)) != 1
                except RetrievalError:
                    failed = True
                latencies.append(time.perf_counter() - t0)
                errors.append(int(failed))
                i += clients

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    p50, p99 = percentiles(latencies)
    note = (
        f"{clients} clients × {duration_s:.0f} s, {len(latencies)} requests, {sum(errors)} errors"
    )
    return Row("", 0, "server, concurrent", 1, len(latencies) / elapsed, p50, p99, note)


def speed_rows(
    name: str, retriever: Retriever, index_dir: Path, queries: list[str], args: argparse.Namespace
) -> list[Row]:
    """In-process and through-the-server throughput for each batch size, then concurrency."""
    passages = json.loads((index_dir / "manifest.json").read_text())["corpus"]["rows"]
    rows = []
    for batch in BATCHES:
        qps, p50, p99 = timed_batches(lambda q: retriever.search(q, 3), queries, batch)
        rows.append(Row(name, passages, "in process", batch, qps, p50, p99))
    process, url = start_server(index_dir)
    try:
        with RemoteRetriever(RemoteConfig(url=f"{url}/retrieve", timeout_s=120)) as session:

            def remote(q: list[str]) -> None:
                session.search(q, 3)

            remote(queries[:4])
            for batch in BATCHES:
                rows.append(
                    Row(name, passages, "server", batch, *timed_batches(remote, queries, batch))
                )
        duration = args.duration if name == "bm25" else args.dense_duration
        crowd = hammer(url, queries, args.clients, duration)
        crowd.retriever, crowd.passages = name, passages
        rows.append(crowd)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return rows


def recall_at_3(retriever: Retriever, questions: list[tuple[str, list[str]]]) -> float:
    """Share of questions whose golden answer occurs (case-insensitive) in a top-3 passage."""
    hits: list[list[Hit]] = []
    for start in range(0, len(questions), 256):
        hits.extend(retriever.search([q for q, _ in questions[start : start + 256]], 3))
    found = 0
    for (_, answers), top in zip(questions, hits, strict=True):
        text = " ".join(h.document.contents.lower() for h in top)
        found += any(a.lower() in text for a in answers)
    return found / len(questions)


def build(kind: str, corpus: Path, out: Path) -> tuple[Retriever, float, float]:
    """Build and load an index; returns it with build seconds and size in MB."""
    started = time.perf_counter()
    build_index(kind, corpus, out, CONFIG)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6
    return load_index(out, config=CONFIG), seconds, size


def print_tables(rows: list[Row], builds: list[str], recalls: list[str], header: str) -> None:
    print(f"\n{header}\n")
    print("| index | passages | build s | size MB |\n|---|---:|---:|---:|")
    print("\n".join(builds))
    print("\n| retriever | passages | mode | batch | queries/s | p50 ms | p99 ms | note |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r.retriever} | {r.passages:,} | {r.mode} | {r.batch} | {r.qps:,.0f} | "
            f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.note} |"
        )
    print("\n| retriever | passages | questions | recall@3 |\n|---|---:|---:|---:|")
    print("\n".join(recalls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, default=Path("../shared/data/corpus/wiki_paragraphs.jsonl")
    )
    parser.add_argument("--qa", default="../shared/data/qa/*.jsonl", help="QA files (glob).")
    parser.add_argument("--scale", type=int, default=1, help="Replicate the corpus N times.")
    parser.add_argument("--queries", type=int, default=2048, help="Queries per BM25 speed run.")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=30.0, help="BM25 concurrency seconds.")
    parser.add_argument("--dense-limit", type=int, default=1000, help="Passages for dense.")
    parser.add_argument("--dense-queries", type=int, default=64)
    parser.add_argument("--dense-duration", type=float, default=10.0)
    parser.add_argument("--dense-recall-questions", type=int, default=256)
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument(
        "--work", type=Path, default=None, help="Scratch dir (default: a temp dir)."
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="searchrl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    questions = load_questions(args.qa)
    rng = np.random.default_rng(0)
    sample = [questions[i] for i in rng.permutation(len(questions))]
    queries = [q for q, _ in sample]
    rows, builds, recalls = [], [], []

    corpus = work / "corpus.jsonl"
    passages = write_corpus(args.corpus, corpus, args.scale, None)
    bm25, seconds, size = build("bm25", corpus, work / "bm25")
    builds.append(f"| bm25 | {passages:,} | {seconds:.1f} | {size:.0f} |")
    rows += speed_rows("bm25", bm25, work / "bm25", queries[: args.queries], args)
    recalls.append(f"| bm25 | {passages:,} | {len(sample):,} | {recall_at_3(bm25, sample):.3f} |")

    if not args.skip_dense:
        small = work / "corpus_dense.jsonl"
        n_dense = write_corpus(args.corpus, small, args.scale, args.dense_limit)
        dense, seconds, size = build("dense", small, work / "dense")
        builds.append(f"| dense (MiniLM, flat) | {n_dense:,} | {seconds:.1f} | {size:.0f} |")
        rows += speed_rows("dense", dense, work / "dense", queries[: args.dense_queries], args)
        subset = sample[: args.dense_recall_questions]
        bm25_small, _, _ = build("bm25", small, work / "bm25_small")
        for name, retriever in (("bm25", bm25_small), ("dense", dense)):
            recall = recall_at_3(retriever, subset)
            recalls.append(f"| {name} | {n_dense:,} | {len(subset):,} | {recall:.3f} |")
    header = (
        f"corpus {args.corpus} × {args.scale} = {passages:,} passages; dense on the first "
        f"{args.dense_limit:,}; {len(questions):,} QA questions; top-3 throughout"
    )
    print_tables(rows, builds, recalls, header)


if __name__ == "__main__":
    main()
