"""Markdown tables of `scale.py`'s results (WORK/<passages>/results.json, every scale run)."""

from __future__ import annotations

import json
from pathlib import Path

TWO_CORES = ("2proc_", "2thr_")
"""Key prefixes of the rows measured with both cores (BM25 helper processes, faiss threads)."""


def _qps(entry: dict | None) -> str:
    """queries/s in wall time [per CPU second of the searching process]."""
    if not entry:
        return "–"
    cpu = entry.get("qps_per_cpu_s", entry.get("qps_per_server_cpu_s"))
    return f"{entry['qps']:,.0f}" + (f" [{cpu:,.0f}]" if cpu and cpu == cpu else "")


def _build_rows(n: int, results: dict) -> list[str]:
    rows = []
    for stage, name in (("bm25", "BM25"), ("dense", "IVF-PQ (synthetic vectors)")):
        r = results.get(stage)
        if r:
            size = r.get("index_mb", r["size_mb"])
            rows.append(f"| {n:,} | {name} | {r['wall_s']:,.0f} | {r['cpu_s']:,.0f} | "
                        f"{r['peak_rss_mb']:,.0f} | {size:,.0f} |")  # fmt: skip
    return rows


def _speed_rows(n: int, results: dict) -> list[str]:
    rows = []
    runs = [
        ("bm25-speed", "BM25", ""),
        ("bm25-speed", "BM25, 2 processes", "2proc_"),
        ("dense-speed", "IVF-PQ", ""),
        ("dense-speed", "IVF-PQ, 2 threads", "2thr_"),
    ]
    for stage, name, prefix in runs:
        entries = results.get(stage, {}).items()
        r = {key[len(prefix) :]: value for key, value in entries
             if key.startswith(prefix) and (prefix or not key.startswith(TWO_CORES))}  # fmt: skip
        if not r:
            continue
        crowd = r.get("server_16_clients", {})
        memory = r.get("server_memory", {})
        rows.append(
            f"| {n:,} | {name} | {_qps(r.get('batch1'))} | {_qps(r.get('batch16'))} | "
            f"{_qps(r.get('batch64'))} | {_qps(r.get('server_batch16'))} | "
            f"{_qps(r.get('server_batch64'))} | {_qps(crowd)} ({crowd.get('p50_ms', 0):.0f}/"
            f"{crowd.get('p99_ms', 0):.0f} ms, {crowd.get('errors', 0)} errors) | "
            f"{memory.get('peak_rss_mb', 0):,.0f} / {memory.get('anonymous_mb', 0):,.0f} |"
        )
    return rows


def report(work: Path) -> None:
    """Print every table for the scales found under `work`."""
    scales = sorted((int(p.parent.name), json.loads(p.read_text()))
                    for p in work.glob("*/results.json"))  # fmt: skip
    print("| passages | index | build s (wall) | CPU s | peak RSS MB | index on disk MB |")
    print("|---:|---|---:|---:|---:|---:|")
    for n, results in scales:
        print("\n".join(_build_rows(n, results)))
    print("\n| passages | retriever | b1 q/s | b16 q/s | b64 q/s | server b16 | server b64 | "
          "16 clients q/s (p50/p99) | server peak RSS / anonymous MB |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for n, results in scales:
        print("\n".join(_speed_rows(n, results)))
    print("\n| passages | nprobe | recall@3 vs exact (synthetic) | q/s at batch 64 |")
    print("|---:|---:|---:|---:|")
    for n, results in scales:
        for key, r in results.get("dense-speed", {}).items():
            if key.startswith("nprobe"):
                print(f"| {n:,} | {key[6:]} | {r['recall@3_vs_exact']:.3f} | {r['qps']:,.0f} |")
    print(
        "\n| passages | retriever | identical top-10 | max score diff | "
        "1 shard b64 / 16 clients q/s | 2 shards b64 / 16 clients q/s | ratio (b64) |"
    )
    print("|---:|---|---:|---:|---|---|---:|")
    for n, results in scales:
        for name, r in results.get("shards", {}).items():
            if not isinstance(r, dict) or "1" not in r:
                continue
            one, two = r["1"], r["2"]
            ratio = two["batch64"]["qps"] / one["batch64"]["qps"]
            print(f"| {n:,} | {name} | {r['identical_top10_ids']:.3f} | "
                  f"{r['max_score_difference']:.2g} | {_qps(one['batch64'])} / "
                  f"{_qps(one['16_clients'])} | {_qps(two['batch64'])} / "
                  f"{_qps(two['16_clients'])} | {ratio:.2f} |")  # fmt: skip
