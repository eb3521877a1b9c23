"""Query encoding through the `/retrieve` servers: Search-R1's `retrieval_server.py` against
`searchrl serve`, on the same faiss Flat file, loaded by one stdlib client, in one run.

    taskset -c 1 python benchmarks/retrieval/query_server.py \
        --corpus ../shared/data/corpus/wiki_paragraphs.jsonl --passages 2000 \
        --search-r1 /tmp/sr1/retrieval_server_local.py --search-r1-python /tmp/sr1/venv/bin/python

`--search-r1` is a local copy of Search-R1's server made to run on a CPU (its `.cuda()` calls
no-ops, fp16 off, bound to 127.0.0.1, `PORT` from the environment); it is not part of this
project and is never committed. Both servers get `OMP_NUM_THREADS=1` and inherit this
script's CPU affinity. The index is built once by `searchrl index --kind dense` with the
embedded MiniLM (torch engine, so the file is the fp32 reference) over the first `--passages`
passages; Search-R1 serves it with the same model directory, mean pooling and 256 tokens.

Rows: requests of 1, 16 and 64 queries sent one after another, then 16 client threads each
sending one-query requests for `--seconds`. "agreement" is the share of queries whose top-3
ids equal Search-R1's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from searchrl.config.retrieval import DEFAULT_ENCODER
from searchrl.retrieval.dense import encoder_path

BATCHES = (1, 16, 64)
CLIENTS = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url: str, queries: list[str]) -> list:
    body = json.dumps({"queries": queries, "topk": 3, "return_scores": True}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())["result"]


def wait_ready(url: str, process: subprocess.Popen, seconds: float = 900) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            post(url, ["warm up"])
            return
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(url)


def sequential(url: str, queries: list[str], batch: int, requests: int) -> tuple[float, float]:
    """queries/s and p50 request latency (ms) for back-to-back requests of `batch` queries."""
    latencies = []
    started = time.perf_counter()
    for i in range(requests):
        chunk = queries[i * batch : (i + 1) * batch]
        sent = time.perf_counter()
        post(url, chunk)
        latencies.append(time.perf_counter() - sent)
    wall = time.perf_counter() - started
    return batch * requests / wall, 1000 * statistics.median(latencies)


def concurrent(url: str, queries: list[str], seconds: float) -> tuple[float, float]:
    """queries/s and p50 latency with CLIENTS threads each sending one-query requests."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            post(url, [queries[i % len(queries)]])
            latencies.append(time.perf_counter() - sent)
            i += CLIENTS

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - started), 1000 * statistics.median(latencies)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, url: str, queries: list[str], seconds: float, pid: int) -> dict:
    """Each row: (queries/s, p50 ms, queries per server CPU second)."""
    row: dict = {"name": name}
    for batch in BATCHES:
        requests = max(64 // batch, 4)
        before = cpu_seconds(pid)
        rate, p50 = sequential(url, queries, batch, requests)
        row[batch] = (rate, p50, batch * requests / max(cpu_seconds(pid) - before, 1e-3))
        print(f"  {name} batch {batch}: {rate:.1f} queries/s", flush=True)
    before, started = cpu_seconds(pid), time.perf_counter()
    rate, p50 = concurrent(url, queries, seconds)
    done = rate * (time.perf_counter() - started)
    row["concurrent"] = (rate, p50, done / max(cpu_seconds(pid) - before, 1e-3))
    print(f"  {name} {CLIENTS} clients: {rate:.1f} queries/s", flush=True)
    row["top3"] = [[h["document"]["id"] for h in hits] for hits in post(url, queries[:64])]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument(
        "--qa", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/qa/nq.jsonl"
    )
    parser.add_argument("--search-r1", type=Path, required=True)
    parser.add_argument("--search-r1-python", default=sys.executable)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="query-server-"))
    corpus = work / "corpus.jsonl"
    with args.corpus.open() as source, corpus.open("w") as out:
        for _, line in zip(range(args.passages), source, strict=False):
            out.write(line)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    index = work / "index"
    subprocess.run(["searchrl", "index", "--kind", "dense", "--corpus", str(corpus), "--out",
                    str(index), "--set", "dense.engine=torch"], check=True, env=env)  # fmt: skip
    with args.qa.open() as handle:
        queries = [json.loads(line)["question"] for line in handle]
    random.Random(0).shuffle(queries)
    queries = queries[:2048]
    servers = {
        "Search-R1 server": [args.search_r1_python, str(args.search_r1), "--index_path",
                             str(index / "faiss.index"), "--corpus_path", str(corpus), "--topk",
                             "3", "--retriever_name", "minilm", "--retriever_model",
                             encoder_path(DEFAULT_ENCODER)],
        "searchrl serve": ["searchrl", "serve", "--index", str(index)],
    }  # fmt: skip
    rows = []
    for name, command in servers.items():
        port = free_port()
        if name == "searchrl serve":
            command = [*command, "--port", str(port)]
        log = (work / f"{name.split()[0]}.log").open("w")
        process = subprocess.Popen(command, env={**env, "PORT": str(port)}, stdout=log, stderr=log)
        try:
            url = f"http://127.0.0.1:{port}/retrieve"
            wait_ready(url, process)
            rows.append(measure(name, url, queries, args.seconds, process.pid))
        finally:
            process.terminate()
            process.wait(timeout=60)
    reference = rows[0]["top3"]
    print(f"\n{args.passages} passages, MiniLM, faiss Flat; queries/s (p50 ms) [queries per "
          "server CPU second]\n")  # fmt: skip
    print("| server | " + " | ".join(f"batch {b}" for b in BATCHES)
          + f" | {CLIENTS} concurrent batch-1 clients | top-3 agreement |")  # fmt: skip
    print("|---|" + "---:|" * (len(BATCHES) + 2))
    for row in rows:
        cells = [
            f"{row[b][0]:.0f} ({row[b][1]:.0f}) [{row[b][2]:.0f}]" for b in (*BATCHES, "concurrent")
        ]
        agree = sum(a == b for a, b in zip(row["top3"], reference, strict=True)) / len(reference)
        print(f"| {row['name']} | " + " | ".join(cells) + f" | {agree:.2f} |")
    ours, theirs = rows[1], rows[0]
    for label, k in (("queries/s", 0), ("queries per server CPU s", 2)):
        ratios = [f"{b}: {ours[b][k] / theirs[b][k]:.1f}x" for b in (*BATCHES, "concurrent")]
        print(f"searchrl vs Search-R1, {label}: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
