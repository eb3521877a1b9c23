"""Pieces of the scale benchmark (`scale.py`): synthetic vectors shaped like real ones, a
progress line with ETA for logs, peak memory of child processes, and throughput timers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import urllib3

from searchrl.config.retrieval import RemoteConfig
from searchrl.retrieval import RemoteRetriever, RetrievalError


class Progress:
    """`label  n/total  rate/s  elapsed  ETA` on stderr every `every_s` seconds (a bar in a
    nohup log would be one endless line); `done` units may predate a resumed run."""

    def __init__(self, label: str, total: int, done: int = 0, every_s: float = 30.0) -> None:
        self.label, self.total, self.done = label, total, done
        self.start_done, self.every_s = done, every_s
        self.started = self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done >= self.total:
            self.last = now
            rate = (self.done - self.start_done) / max(now - self.started, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(f"{self.label}: {self.done:,}/{self.total:,} {rate:,.0f}/s "
                  f"elapsed {now - self.started:,.0f} s ETA {eta:,.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip


class SyntheticVectors:
    """Unit vectors drawn like real encoder vectors: a mixture over `centres` (k-means of
    real MiniLM passage vectors) plus Gaussian residuals with the real residuals' covariance
    (its eigenbasis and spread). Row i is drawn from its own seed, so any subset of rows —
    the training sample, a part, an exact-search chunk — is reproducible and never stored."""

    def __init__(self, model: Path, rows: int, seed: int = 0) -> None:
        fitted = np.load(model)
        self.centres = fitted["centres"].astype(np.float32)
        self.weights = fitted["weights"].astype(np.float64)
        self.basis = (fitted["basis"] * fitted["spread"][None, :]).astype(np.float32)
        self.rows, self.seed = rows, seed
        self.dim = self.centres.shape[1]
        self._cumulative = np.cumsum(self.weights / self.weights.sum())

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        noise = np.empty((len(rows), self.dim), dtype=np.float32)
        pick = np.empty(len(rows))
        for i, row in enumerate(rows.tolist()):
            rng = np.random.default_rng((self.seed, row))
            pick[i] = rng.random()
            noise[i] = rng.standard_normal(self.dim, dtype=np.float32)
        cluster = np.minimum(np.searchsorted(self._cumulative, pick), len(self.centres) - 1)
        out = self.centres[cluster] + noise @ self.basis.T
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class Slice:
    """Rows [start, stop) of a vector source, renumbered from 0 (one shard's vectors)."""

    def __init__(self, source: SyntheticVectors, start: int, stop: int) -> None:
        self.source, self.start, self.rows = source, start, stop - start

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self.source.vectors(rows + self.start)


def top10(scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 10 best (scores, rows) per query row, best first."""
    top = np.argpartition(-scores, 10, axis=1)[:, :10]
    scores, rows = np.take_along_axis(scores, top, 1), np.take_along_axis(rows, top, 1)
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def exact_rows(
    model: Path, total: int, queries: np.ndarray, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-10 over synthetic rows [start, stop) (one process's share)."""
    source = SyntheticVectors(model, total)
    best_s = np.full((len(queries), 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 10), dtype=np.int64)
    step = Progress(f"exact search [{start:,}, {stop:,})", stop - start)
    for first in range(start, stop, 1 << 18):
        chunk = np.arange(first, min(first + (1 << 18), stop))
        scores = queries @ source.vectors(chunk).T
        best_s, best_i = top10(
            np.concatenate([best_s, scores], axis=1),
            np.concatenate([best_i, np.broadcast_to(chunk, scores.shape)], axis=1),
        )
        step(len(chunk))
    return best_s, best_i


def fit_synthetic_model(vectors: np.ndarray, out: Path, clusters: int = 256) -> None:
    """k-means centres and the residual covariance's eigenbasis of real vectors."""
    import faiss

    kmeans = faiss.Kmeans(vectors.shape[1], clusters, niter=20, seed=0, spherical=True)
    kmeans.train(vectors)
    assign = kmeans.index.search(vectors, 1)[1][:, 0]
    residual = vectors - kmeans.centroids[assign]
    spread, basis = np.linalg.eigh(np.cov(residual, rowvar=False))
    np.savez(out, centres=kmeans.centroids, weights=np.bincount(assign, minlength=clusters),
             basis=basis, spread=np.sqrt(np.maximum(spread, 0)))  # fmt: skip


def run_child(args: Sequence[str], log: Path) -> dict[str, float]:
    """Run a stage in a child process (output appended to `log`); its wall seconds, CPU
    seconds and peak resident memory (ru_maxrss of that child alone, via wait4)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEARCHRL_THREADS": "1"}
    started = time.perf_counter()
    with log.open("ab") as handle:
        process = subprocess.Popen(list(args), stdout=handle, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"stage failed: {' '.join(args[2:6])} … (see {log})")
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def directory_mb(path: Path) -> float:
    """Bytes on disk under `path` (hard links counted once), in MB."""
    seen, total = set(), 0
    for item in path.rglob("*"):
        if item.is_file():
            stat = item.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total / 1e6


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process tree: this process (pid None) with its helper
    processes (`bm25.processes`), or a server's."""
    import psutil

    root = psutil.Process(pid)  # None: this process
    return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])


def batched_qps(
    search: Callable[[list], object], queries: list, batch: int, server: int | None = None
) -> dict[str, float]:
    """Queries/s and p50/p99 batch latency (ms) over all queries in batches of `batch`, and
    queries per CPU second of whoever searches (this process, or the `server` process tree):
    on a shared machine wall time depends on the other jobs, CPU time does not."""
    latencies = []
    started, cpu = time.perf_counter(), cpu_seconds(server)
    for start in range(0, len(queries), batch):
        t0 = time.perf_counter()
        search(queries[start : start + batch])
        latencies.append(time.perf_counter() - t0)
    elapsed, used = time.perf_counter() - started, cpu_seconds(server) - cpu
    ms = np.asarray(latencies) * 1000
    return {"qps": len(queries) / elapsed, "qps_per_cpu_s": len(queries) / max(used, 1e-9),
            "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99))}  # fmt: skip


def concurrent_qps(
    url: str, queries: list[str], clients: int, duration_s: float, server: int | None = None
) -> dict:
    """`clients` threads, each its own connection, one query per request, for `duration_s`;
    with `server` (its pid) also the requests per CPU second of the server process tree."""
    latencies: list[float] = []
    errors = [0]
    stop = time.monotonic() + duration_s

    def client(offset: int) -> None:
        with RemoteRetriever(RemoteConfig(url=url, timeout_s=120, retries=0)) as session:
            i = offset
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    session.search([queries[i % len(queries)]], 3)
                except RetrievalError:
                    errors[0] += 1
                latencies.append(time.perf_counter() - t0)
                i += clients

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started, cpu = time.perf_counter(), cpu_seconds(server) if server else 0.0
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = cpu_seconds(server) - cpu if server else float("nan")
    ms = np.asarray(latencies) * 1000
    return {"qps": len(latencies) / (time.perf_counter() - started), "requests": len(latencies),
            "qps_per_server_cpu_s": len(latencies) / used if server else float("nan"),
            "errors": errors[0], "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99))}  # fmt: skip


def start_server(
    args: Sequence[str], port: int, timeout_s: float = 1800, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`searchrl serve ARGS --port PORT` in its own process (`env` added to this one's),
    returned once `/health` is ok."""
    command = [sys.executable, "-m", "searchrl", "serve", *args, "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, **(env or {})})  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            reply = urllib3.request("GET", f"http://127.0.0.1:{port}/health", timeout=2,
                                    retries=False)  # fmt: skip
            if reply.status == 200:
                return process
        except urllib3.exceptions.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server {' '.join(args)} did not start")
        time.sleep(0.5)


def process_memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process tree: RSS now, its anonymous (non-file) part, and the peak
    RSS of each process summed; memory-mapped index pages are file-backed page cache that the
    kernel can reclaim, anonymous memory is what the server really holds."""
    import psutil

    rss = anon = peak = 0.0
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        rollup = Path(f"/proc/{proc.pid}/smaps_rollup").read_text().splitlines()
        fields = {line.split(":")[0]: line.split()[1] for line in rollup[1:]}
        rss += int(fields["Rss"]) / 1024
        anon += int(fields["Anonymous"]) / 1024
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        peak += next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
    return {"rss_mb": rss, "anonymous_mb": anon, "peak_rss_mb": peak}


def save_json(path: Path, data: object) -> None:
    """Write JSON atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
