"""Which compressed dense index, and with which settings: a sweep on >200k real passages.

    nohup nice -n 19 python benchmarks/retrieval/dense_sweep.py --work runs/retrieval/recall &

Runs on the vectors `recall_corpus.py` encoded (34,917 real Wikipedia passages + ~199k
passages of one synthetic world, all encoded by the embedded MiniLM; NQ-open dev questions
and the world's test questions). For each candidate index it records build (training and
adding) seconds, bytes per passage, and for each nprobe (or efSearch) queries/s at batch 64
without query encoding, and recall@3 two ways:

- overlap: |top-3 ∩ Flat's top-3| / 3 (the interface check's criterion);
- answers: share of questions with a golden answer in a top-3 passage, next to Flat's
  (the issue's criterion: within 2 points of Flat).

Results are appended to WORK/sweep.jsonl as each candidate finishes, so a rerun skips the
finished ones; `--report` prints the table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import faiss
import numpy as np

from recall_corpus import load_vectors
from scale_parts import Progress
from searchrl.config.retrieval import DenseConfig
from searchrl.retrieval.ivfpq import factory_string, set_search_params, training_rows

PROBES = (4, 8, 16, 32, 64, 128)
EF = (16, 32, 64, 128, 256)
CANDIDATES = {
    # name: (factory, training vectors); IVF512 is the automatic nlist (√N) at this size
    "IVF512,PQ48": ("IVF512,PQ48", 131_072),
    "IVF512,PQ48 (train 32k)": ("IVF512,PQ48", 32_768),
    "IVF2048,PQ48": ("IVF2048,PQ48", 131_072),
    "IVF512,PQ24": ("IVF512,PQ24", 131_072),
    "IVF512,PQ96": ("IVF512,PQ96", 131_072),
    "IVF512,PQ192": ("IVF512,PQ192", 131_072),
    # 4-bit codes scanned with SIMD lookup tables held in registers (faiss "fast scan")
    "IVF512,PQ192x4fs": ("IVF512,PQ192x4fs", 131_072),
    "IVF512,PQ384x4fs": ("IVF512,PQ384x4fs", 131_072),
    "OPQ48,IVF512,PQ48": ("OPQ48_384,IVF512,PQ48", 131_072),
    "OPQ96,IVF512,PQ96": ("OPQ96_384,IVF512,PQ96", 131_072),
    "IVF2048_HNSW32,PQ48": ("IVF2048_HNSW32,PQ48", 131_072),
    "HNSW32_PQ48": ("HNSW32_PQ48", 131_072),
}


def answers_found(rows: np.ndarray, texts: list[str], answers: list[list[str]]) -> np.ndarray:
    """Per question: does a golden answer occur (case-insensitively) in a top-3 passage?"""
    found = np.zeros(len(rows), dtype=bool)
    for i, top in enumerate(rows):
        text = " ".join(texts[r].lower() for r in top if r >= 0)
        found[i] = any(a.lower() in text for a in answers[i] if a.strip())
    return found


def qps(index: faiss.Index, queries: np.ndarray) -> float:
    started = time.perf_counter()
    for start in range(0, len(queries), 64):
        index.search(queries[start : start + 64], 3)
    return len(queries) / (time.perf_counter() - started)


def evaluate(index: faiss.Index, queries: np.ndarray, flat: np.ndarray, texts: list[str],
             answers: list[list[str]], sources: np.ndarray) -> dict:  # fmt: skip
    rows = index.search(queries, 3)[1]
    overlap = np.array([len(set(a) & set(b)) / 3 for a, b in zip(rows, flat, strict=True)])
    found = answers_found(rows, texts, answers)
    out = {"qps_b64": qps(index, queries)}
    for source in ("nq", "world"):
        mask = sources == source
        out[f"overlap_{source}"] = float(overlap[mask].mean())
        out[f"answers_{source}"] = float(found[mask].mean())
    return out


def run_candidate(name: str, work: Path, data: dict) -> dict:
    factory, train_size = CANDIDATES[name]
    vectors = data["vectors"]
    rng = np.random.default_rng(0)
    sample = vectors[np.sort(rng.choice(len(vectors), min(train_size, len(vectors)), False))]
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    index.train(sample)
    trained = time.perf_counter()
    index.add(vectors)
    added = time.perf_counter()
    path = work / "sweep.index"
    faiss.write_index(index, str(path))
    size = path.stat().st_size
    path.unlink()
    out = {"name": name, "factory": factory, "train_vectors": len(sample),
           "train_s": trained - started, "add_s": added - trained,
           "bytes_per_passage": size / len(vectors), "settings": {}}  # fmt: skip
    params = faiss.ParameterSpace()
    knob, values = ("efSearch", EF) if name.startswith("HNSW") else ("nprobe", PROBES)
    for value in values:
        params.set_index_parameter(index, knob, value)
        out["settings"][f"{knob}={value}"] = evaluate(index, data["queries"], data["flat"],
                                                      data["texts"], data["answers"],
                                                      data["sources"])  # fmt: skip
    return out


def interface_check(work: Path, data: dict, rows: int = 20_000) -> dict:
    """The issue's check of `searchrl index --set dense.index_type=ivfpq` with default
    settings, on the first `rows` real Wikipedia passages: NQ top-3 overlap with Flat."""
    config = DenseConfig(index_type="ivfpq")
    vectors = data["vectors"][:rows]
    queries = data["queries"][data["sources"] == "nq"]
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    truth = flat.search(queries, 3)[1]
    index = faiss.index_factory(vectors.shape[1], factory_string(config, vectors.shape[1], rows),
                                faiss.METRIC_INNER_PRODUCT)  # fmt: skip
    index.train(vectors[training_rows(rows, config.train_size)])
    index.add(vectors)
    set_search_params(index, config)
    found = index.search(queries, 3)[1]
    overlap = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(found, truth, strict=True)])
    result = {"rows": rows, "factory": factory_string(config, vectors.shape[1], rows),
              "nprobe": config.ivf_nprobe, "nq_questions": len(queries),
              "overlap": float(overlap)}  # fmt: skip
    (work / "interface_check.json").write_text(json.dumps(result))
    return result


def load_data(work: Path) -> dict:
    vectors = load_vectors(work)
    queries = np.load(work / "queries.npy")
    questions = [json.loads(line) for line in (work / "questions.jsonl").open()]
    with (work / "corpus.jsonl").open() as handle:
        texts = [json.loads(line)["contents"] for line in handle]
    flat_path = work / "flat_top3.npy"
    if not flat_path.exists():
        flat = faiss.IndexFlatIP(vectors.shape[1])
        flat.add(vectors)
        np.save(flat_path, flat.search(queries, 3)[1])
    flat_rows = np.load(flat_path)
    answers = [q["golden_answers"] for q in questions]
    sources = np.array([q["source"] for q in questions])
    found = answers_found(flat_rows, texts, answers)
    flat_recall = {s: float(found[sources == s].mean()) for s in ("nq", "world")}
    return {"vectors": vectors, "queries": queries, "flat": flat_rows, "texts": texts,
            "answers": answers, "sources": sources, "flat_recall": flat_recall}  # fmt: skip


def report(work: Path) -> None:
    check = work / "interface_check.json"
    if check.exists():
        print(f"interface check (defaults, first 20k Wikipedia passages): {check.read_text()}")
    data = json.loads((work / "flat.json").read_text())
    print(f"{data['passages']:,} passages, {data['questions']} questions; Flat recall@3 "
          f"(answers): NQ {data['nq']:.3f}, world {data['world']:.3f}\n")  # fmt: skip
    print(
        "| index | bytes/passage | train s | add s | setting | q/s b64 | overlap NQ | "
        "overlap world | answers NQ (Δ Flat) | answers world (Δ Flat) |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for line in (work / "sweep.jsonl").open():
        r = json.loads(line)
        for setting, m in r["settings"].items():
            delta_nq = 100 * (m["answers_nq"] - data["nq"])
            delta_world = 100 * (m["answers_world"] - data["world"])
            print(f"| {r['name']} | {r['bytes_per_passage']:.0f} | {r['train_s']:.0f} | "
                  f"{r['add_s']:.0f} | {setting} | {m['qps_b64']:,.0f} | "
                  f"{m['overlap_nq']:.3f} | {m['overlap_world']:.3f} | "
                  f"{m['answers_nq']:.3f} ({delta_nq:+.1f}) | "
                  f"{m['answers_world']:.3f} ({delta_world:+.1f}) |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(
        "--only", help="candidate names in the order to run, separated by ';' (names hold commas)"
    )
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--check", action="store_true", help="only the 20k interface check")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(";")] if args.only else list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidates {unknown}; known: {'; '.join(CANDIDATES)}")
    if args.report:
        report(args.work)
        return
    faiss.omp_set_num_threads(1)
    data = load_data(args.work)
    if args.check:
        print(interface_check(args.work, data))
        return
    summary = {"passages": len(data["vectors"]), "questions": len(data["queries"]),
               **data["flat_recall"]}  # fmt: skip
    (args.work / "flat.json").write_text(json.dumps(summary))
    results = args.work / "sweep.jsonl"
    done = {json.loads(line)["name"] for line in results.open()} if results.exists() else set()
    todo = [n for n in names if n not in done]
    step = Progress("sweep candidates", len(todo), every_s=0)
    for name in todo:
        result = run_candidate(name, args.work, data)
        with results.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        step(1)
    report(args.work)


if __name__ == "__main__":
    main()
