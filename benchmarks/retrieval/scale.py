"""Retrieval at wiki-18 scale on one machine: BM25 and a compressed dense index over 1M, 5M
and 21M passages — build time, peak memory, size on disk, queries/s — and 2 shards vs 1.

    nohup nice -n 19 python benchmarks/retrieval/scale.py --work runs/retrieval/scale \\
        --passages 1000000 --real runs/retrieval/recall > scale-1M.log 2>&1 &
    python benchmarks/retrieval/scale.py --work runs/retrieval/scale --report   # the tables

Every stage runs in its own child process, so its peak RSS (wait4's ru_maxrss) is its own,
and writes its numbers into WORK/<passages>/results.json; a finished stage is skipped when the
command is run again, and the dense build resumes from its finished parts.

- corpus: `searchrl.data.world.scale` (synthetic worlds, questions with known gold passages);
- bm25: `build_index("bm25")` (streamed build), then in-process batches of 1/16/64 world
  questions, the `/retrieve` server at the same batches, 16 concurrent one-query clients;
- dense: IVF-PQ (`DenseConfig` defaults, `--set` to change) over *synthetic* vectors drawn
  like real MiniLM vectors (`scale_parts.SyntheticVectors`, fitted on 16,384 real Wikipedia
  passages encoded by `recall_corpus.py`); the passages are the BM25 index's (hard links).
  Speed is faiss search of real NQ question vectors at batches of 1/16/64, i.e. without
  query encoding; recall is measured against exact search of the same synthetic vectors;
  the server rows (16 clients) include encoding each query with MiniLM;
- shards (`--shards 2`): the same corpus as 2 shards (BM25 scored with whole-corpus
  statistics; dense sharing the trained quantizer) behind `searchrl serve`, against 1.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from itertools import pairwise
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from rich.console import Console

from scale_parts import (
    Progress,
    Slice,
    SyntheticVectors,
    batched_qps,
    concurrent_qps,
    directory_mb,
    exact_rows,
    fit_synthetic_model,
    process_memory_mb,
    run_child,
    save_json,
    start_server,
    top10,
)
from searchrl.config import load_config
from searchrl.config.retrieval import DEFAULT_ENCODER, RetrievalConfig
from searchrl.data.world.scale import ScaleCorpus, write_scale_corpus
from searchrl.retrieval import RemoteRetriever, build_index, load_index
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.ivfpq import FAISS_FILE, IVFPQBuilder, read_index, set_search_params
from searchrl.retrieval.manifest import read_manifest, write_manifest
from searchrl.retrieval.shards import free_port
from searchrl.retrieval.store import DocumentStore, write_store

BATCHES = (1, 16, 64)
NPROBES = (4, 8, 16, 32, 64, 128)
STAGES = ("corpus", "bm25", "dense", "exact", "bm25-speed", "dense-speed", "shards")


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


class Run:
    """Paths and settings of one scale."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = args.work / str(args.passages)
        self.corpus = self.root / "corpus"
        self.bm25, self.dense = self.root / "bm25", self.root / "dense"
        self.results = self.root / "results.json"
        self.model = args.work / "synthetic-model.npz"
        self.queries = args.work / "query-vectors.npy"
        self.config: RetrievalConfig = load_config(RetrievalConfig, None, args.set or [])

    def record(self, stage: str, values: dict) -> None:
        """Add a stage's numbers; locked, as two runs may share a scale (BM25's stages and
        the dense ones, whose build needs only the passage count, on the two cores)."""
        with (self.root / ".results.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            results = load(self.results)
            results[stage] = {**results.get(stage, {}), **values}
            save_json(self.results, results)

    def questions(self) -> list[dict]:
        with (self.corpus / "questions.jsonl").open() as handle:
            return [json.loads(line) for line in handle]


def stage_corpus(run: Run) -> dict:
    spec = ScaleCorpus(passages=run.args.passages)
    manifest = write_scale_corpus(spec, run.corpus, Progress("corpus", spec.passages))
    return {"passages": manifest["passages"], "questions": manifest["questions"],
            "size_mb": manifest["corpus_bytes"] / 1e6}  # fmt: skip


def stage_bm25(run: Run) -> dict:
    console = Console(stderr=True, force_terminal=True, width=110)  # a bar in the log
    build_index("bm25", run.corpus / "corpus.jsonl", run.bm25, run.config, console, force=True)
    stats = json.loads((run.bm25 / "bm25s" / "stats.json").read_text())
    postings = int(np.load(run.bm25 / "bm25s" / "indptr.csc.index.npy", mmap_mode="r")[-1])
    return {"size_mb": directory_mb(run.bm25), "postings": postings,
            "avg_length": stats["total_length"] / stats["passages"]}  # fmt: skip


def ensure_model(run: Run) -> None:
    """Fit the synthetic-vector model on real Wikipedia passage vectors (the first part
    `recall_corpus.py` encoded: 16,384 Wikipedia passages) and encode the NQ-open questions
    once: real query vectors for the synthetic index."""
    if not run.model.exists():
        first = run.args.real / "vectors" / "part-00000.npy"
        if not first.exists():
            raise SystemExit(f"no encoded vectors yet: {first}")
        fit_synthetic_model(np.load(first), run.model)
    if not run.queries.exists():
        from searchrl.retrieval.dense import encode_texts, load_encoder

        shared = run.args.real / "questions.jsonl"
        questions = [json.loads(line) for line in shared.open()]
        texts = [q["question"] for q in questions if q["source"] == "nq"]
        config = replace(run.config.dense, torch_threads=1)
        vectors = encode_texts(load_encoder(config), config, texts, passages=False)
        np.save(run.queries, vectors)


def stage_dense(run: Run) -> dict:
    ensure_model(run)
    rows = run.args.passages  # the vectors need only the count: the build overlaps BM25's
    source = SyntheticVectors(run.model, rows)
    build = run.root / "dense.partial"
    build.mkdir(exist_ok=True)
    step = Progress("dense (vectors made)", rows + min(rows, run.config.dense.train_size))

    class Counted:
        rows = source.rows

        def vectors(self, picked: np.ndarray) -> np.ndarray:
            step(len(picked))
            return source.vectors(picked)

    started = time.perf_counter()
    IVFPQBuilder(run.config.dense, Counted(), run.root / "dense-work").build(build)
    build_only_s = time.perf_counter() - started
    while not (run.bm25 / "manifest.json").exists():  # BM25's build may still be running
        time.sleep(30)
    store = DocumentStore(run.bm25)
    if len(store) != rows:
        raise SystemExit(f"{run.bm25} holds {len(store)} passages, the vectors {rows}")
    write_store(store, build)  # hard links: one copy of the passages
    corpus = read_manifest(run.bm25).corpus
    params = asdict(replace(run.config.dense, index_type="ivfpq"))
    write_manifest(build, "dense", corpus, params, encoder=DEFAULT_ENCODER)
    marker = "vectors drawn by benchmarks/retrieval/scale_parts.py\n"
    (build / "SYNTHETIC_VECTORS").write_text(marker)
    build.rename(run.dense)
    for part in (run.root / "dense-work").glob("part-*"):
        part.unlink()
    index = read_index(run.dense / FAISS_FILE)
    return {"size_mb": directory_mb(run.dense),  # the passages are hard links to bm25's
            "index_mb": sum(f.stat().st_size for f in run.dense.glob("faiss.*")) / 1e6,
            "build_only_s": build_only_s, "nlist": index_nlist(index)}  # fmt: skip


def index_nlist(index: object) -> int:
    import faiss

    return int(faiss.extract_index_ivf(index).nlist)


def stage_exact(run: Run) -> dict:
    """Exact top-10 of the first 256 NQ vectors over the synthetic vectors, which are made
    again chunk by chunk (~10k rows/s a core: 35 min at 21M), the rows split over
    `--processes` processes."""
    queries = np.load(run.queries)[:256]
    rows = read_manifest(run.dense).corpus.rows
    edges = np.linspace(0, rows, run.args.processes + 1).astype(np.int64)
    jobs = [(run.model, rows, queries, int(a), int(b)) for a, b in pairwise(edges)]
    with ProcessPoolExecutor(len(jobs), mp_context=get_context("spawn")) as pool:
        parts = list(pool.map(exact_rows, *zip(*jobs, strict=True)))
    scores = np.concatenate([p[0] for p in parts], axis=1)
    found = np.concatenate([p[1] for p in parts], axis=1)
    best_s, best_i = top10(scores, found)
    np.savez(run.root / "exact.npz", scores=best_s, rows=best_i)
    return {"queries": len(queries), "processes": len(jobs)}


def stage_bm25_speed(run: Run) -> dict:
    questions = run.questions()
    texts = [q["question"] for q in questions]
    queries = [texts[i % len(texts)] for i in range(run.args.queries)]  # cycled if too few
    retriever = load_index(run.bm25)
    out: dict = {"queries": len(queries)}
    started = time.perf_counter()
    hits = retriever.search(queries[:256], 3)  # cold: pages come from disk
    out["cold_first_256_s"] = time.perf_counter() - started
    gold = [set(q["gold_ids"]) for q in questions[:256]]
    pairs = zip(gold, hits[: len(gold)], strict=True)
    out["recall@3_gold"] = float(np.mean([bool(g & {h.document.id for h in top})
                                          for g, top in pairs]))  # fmt: skip
    for batch in BATCHES:
        out[f"batch{batch}"] = batched_qps(lambda q: retriever.search(q, 3), queries, batch)
    out.update(serve_measure(run, ["--index", str(run.bm25)], queries))
    # both cores: one helper process opens the same index (`bm25.processes=2`)
    pooled = BM25Retriever.load(run.bm25, replace(run.config.bm25, processes=2))
    serve_args = ["--index", str(run.bm25), "--set", "bm25.processes=2"]
    out.update(both_cores(run, "2proc_", lambda q: pooled.search(q, 3), queries, serve_args))
    return out


def both_cores(
    run: Run,
    prefix: str,
    search: Callable[[list], object],
    queries: list,
    serve_args: list[str],
    texts: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """The rows measured with both cores (batches of 16 and 64 in process, then the server
    started with `serve_args` and `env`, asked `texts` or else `queries`), keys prefixed."""
    out = {f"batch{batch}": batched_qps(search, queries, batch) for batch in BATCHES[1:]}
    out.update(serve_measure(run, serve_args, texts or queries, env))
    return {f"{prefix}{name}": value for name, value in out.items()}


def serve_measure(
    run: Run, serve_args: list[str], queries: list[str], env: dict[str, str] | None = None
) -> dict:
    port = free_port()
    overrides = [arg for item in run.args.set or [] for arg in ("--set", item)]
    server = start_server([*serve_args, *overrides], port, env=env)
    url = f"http://127.0.0.1:{port}/retrieve"
    out: dict = {}
    try:
        with RemoteRetriever(url) as client:
            for batch in (16, 64):
                out[f"server_batch{batch}"] = batched_qps(lambda q: client.search(q, 3),
                                                          queries, batch, server.pid)  # fmt: skip
        out["server_16_clients"] = concurrent_qps(url, queries, 16, run.args.duration, server.pid)
        out["server_memory"] = process_memory_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return out


def stage_dense_speed(run: Run) -> dict:
    queries = np.load(run.queries)
    index = read_index(run.dense / FAISS_FILE)
    exact = np.load(run.root / "exact.npz")["rows"][:, :3]
    out: dict = {"queries": len(queries)}
    for nprobe in NPROBES:
        set_search_params(index, replace(run.config.dense, ivf_nprobe=nprobe))
        found = index.search(queries[: len(exact)], 3)[1]
        overlap = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(found, exact, strict=True)])
        speed = batched_qps(lambda q: index.search(np.stack(q), 3), list(queries), 64)
        out[f"nprobe{nprobe}"] = {"recall@3_vs_exact": float(overlap), **speed}
    set_search_params(index, run.config.dense)
    for batch in BATCHES:
        out[f"batch{batch}"] = batched_qps(lambda q: index.search(np.stack(q), 3),
                                           list(queries), batch)  # fmt: skip
    texts = [q["question"] for q in run.questions()][:512]
    out.update(serve_measure(run, ["--index", str(run.dense)], texts))
    # both cores: faiss splits a batch's queries over OpenMP threads
    import faiss

    faiss.omp_set_num_threads(2)
    search = lambda q: index.search(np.stack(q), 3)  # noqa: E731
    serve_args, env = ["--index", str(run.dense)], {"SEARCHRL_THREADS": "2"}
    out.update(both_cores(run, "2thr_", search, list(queries), serve_args, texts, env))
    return out


def dense_shards(run: Run, bm25_shards: Path) -> Path:
    """The synthetic dense index as 2 shards adding to the same trained quantizer; each
    shard's passages are hard links to the BM25 shard's."""
    out = run.root / "dense-2shards"
    if (out / "manifest.json").exists():
        return out
    bounds = read_manifest(bm25_shards).params["bounds"]
    source = SyntheticVectors(run.model, bounds[-1])
    trained = run.root / "dense-work" / "trained.index"
    names = []
    for number, (start, stop) in enumerate(pairwise(bounds)):
        shard = out / f"shard-{number:03d}"
        shard.mkdir(parents=True, exist_ok=True)
        part = Slice(source, start, stop)
        IVFPQBuilder(run.config.dense, part, run.root / f"dense-shard-work-{number}").build(
            shard, trained=trained, first_row=start
        )
        write_store(DocumentStore(bm25_shards / f"shard-{number:03d}"), shard)
        corpus = read_manifest(bm25_shards / f"shard-{number:03d}").corpus
        write_manifest(shard, "dense", corpus, asdict(replace(run.config.dense,
                       index_type="ivfpq")), encoder=DEFAULT_ENCODER)  # fmt: skip
        names.append(shard.name)
    params = {"kind": "dense", "shards": names, "bounds": bounds}
    write_manifest(out, "sharded", read_manifest(run.bm25).corpus, params, DEFAULT_ENCODER)
    return out


def compare_served(run: Run, targets: dict[str, Path], queries: list[str]) -> dict:
    """Serve each target alone, collect top-10 and speed, compare the answers."""
    answers, out = {}, {}
    for name, target in targets.items():
        port = free_port()
        server = start_server(["--index", str(target)], port)
        url = f"http://127.0.0.1:{port}/retrieve"
        try:
            with RemoteRetriever(url) as client:
                answers[name] = client.search(queries, 10)
                out[name] = {f"batch{b}": batched_qps(lambda q: client.search(q, 3), queries, b,
                                                      server.pid) for b in (16, 64)}  # fmt: skip
            out[name]["16_clients"] = concurrent_qps(url, queries, 16, run.args.duration,
                                                     server.pid)  # fmt: skip
            out[name]["memory"] = process_memory_mb(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)
    pairs = list(zip(*answers.values(), strict=True))
    ids = [[[h.document.id for h in hits] for hits in pair] for pair in pairs]
    out["identical_top10_ids"] = float(np.mean([a == b for a, b in ids]))
    out["max_score_difference"] = max(
        (abs(x.score - y.score) for a, b in pairs for x, y in zip(a, b, strict=False)),
        default=0.0,
    )
    return out


def stage_shards(run: Run) -> dict:
    """BM25 (whole-corpus statistics) and dense (shared quantizer) as 2 shards vs 1."""
    sharded = run.root / "bm25-2shards"
    if not (sharded / "manifest.json").exists():
        build_index("bm25", run.corpus / "corpus.jsonl", sharded, run.config, force=True, shards=2)
    queries = [q["question"] for q in run.questions()]
    out = {"bm25": compare_served(run, {"1": run.bm25, "2": sharded}, queries[: run.args.queries])}
    if "dense" in run.args.shard_kinds.split(","):  # at 21M: another ~30 min of vectors
        dense = {"1": run.dense, "2": dense_shards(run, sharded)}
        out["dense"] = compare_served(run, dense, queries[:256])
    return out


CHILDREN = {"corpus": stage_corpus, "bm25": stage_bm25, "dense": stage_dense,
            "exact": stage_exact, "bm25-speed": stage_bm25_speed,
            "dense-speed": stage_dense_speed, "shards": stage_shards}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--real", type=Path, help="recall_corpus.py's work dir (real vectors)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--queries", type=int, default=2048)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--processes", type=int, default=1, help="for the exact search")
    parser.add_argument("--shard-kinds", default="bm25,dense", help="what the shards stage splits")
    parser.add_argument("--set", action="append", help="retrieval config override")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    run = Run(args)
    if args.report:
        from scale_report import report

        report(args.work)
        return
    run.root.mkdir(parents=True, exist_ok=True)
    if args.child:
        values = CHILDREN[args.child](run)
        save_json(run.root / f".{args.child}.json", values)
        return
    for stage in args.stages.split(","):
        if stage in load(run.results):
            print(f"{stage}: done before", flush=True)
            continue
        print(f"{stage}: running", flush=True)
        argv = [sys.executable, __file__, *sys.argv[1:], "--child", stage]
        usage = run_child(argv, run.root / "log.txt")
        run.record(stage, {**load(run.root / f".{stage}.json"), **usage})
        os.remove(run.root / f".{stage}.json")
        print(f"{stage}: {json.dumps(load(run.results)[stage])[:300]}", flush=True)


if __name__ == "__main__":
    main()
