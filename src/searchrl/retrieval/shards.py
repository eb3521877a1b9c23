"""An index split into shards, each served by its own process, answered as one.

Every shard is an ordinary index directory served by an ordinary `/retrieve` server (ours on
this machine or another, or any server speaking Search-R1's contract), so no new protocol is
involved: the front asks every shard for the same batch with `return_scores: true` (a field
of the contract) and merges the ranked lists of each query by score, as faiss's
`IndexShards` merges its sub-indexes' results in process.

The merge is exact: a passage in the global top k is in its own shard's top k, so the union
of the shards' lists holds the whole answer. Equal scores are ordered by shard, then by rank
inside the shard; with shards holding consecutive row ranges of a corpus in order, that is
the corpus-row order an unsharded index uses. Scores are comparable across shards when the
shards score alike: a dense index always (cosine), an ivfpq index exactly when the shards
share one trained quantizer, BM25 exactly when the shards were built with the statistics of
the whole corpus (`searchrl index --shards N` does both; docs/retrieval.md).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import heapq
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib3

from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.types import Hit


def merge_ranked(lists: Sequence[list[Hit]], k: int) -> list[Hit]:
    """The k best hits of several best-first lists: by score, then list order, then rank."""
    keyed = ([(-hit.score, shard, rank, hit) for rank, hit in enumerate(hits)]
             for shard, hits in enumerate(lists))  # fmt: skip
    return [entry[3] for entry in heapq.merge(*keyed)][:k]


class ShardedRetriever:
    """Searches every shard concurrently (one thread per shard: a remote shard spends its
    time waiting on the network, a local one in numpy or faiss outside the GIL) and merges."""

    def __init__(self, shards: Sequence[Retriever]) -> None:
        if not shards:
            raise RetrievalError("a sharded index needs at least one shard")
        self.shards = list(shards)
        self._pool = ThreadPoolExecutor(len(self.shards), thread_name_prefix="shard")

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top k over all shards for each query, best first."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if len(self.shards) == 1:
            return self.shards[0].search(queries, k)
        answers = list(self._pool.map(lambda shard: shard.search(queries, k), self.shards))
        return [merge_ranked([answer[i] for answer in answers], k) for i in range(len(queries))]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies, even by SIGKILL (Linux
    prctl PR_SET_PDEATHSIG), so a killed front never leaves shard servers behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class ShardServers:
    """One `searchrl serve --index DIR` child process per local shard, on 127.0.0.1 and a
    free port, stopped when this object is closed or the interpreter exits."""

    def __init__(self, directories: Sequence[Path], extra_args: Sequence[str] = ()) -> None:
        self.directories = [Path(d) for d in directories]
        self.extra_args = list(extra_args)
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def urls(self) -> list[str]:
        """The `/retrieve` URL of every shard, in shard order."""
        return [f"http://127.0.0.1:{port}/retrieve" for port in self.ports]

    def start(self) -> None:
        """Launch every shard server (they load their indexes in parallel)."""
        atexit.register(self.close)
        for directory in self.directories:
            port = free_port()
            command = [sys.executable, "-m", "searchrl", "serve", "--index", str(directory),
                       "--host", "127.0.0.1", "--port", str(port), *self.extra_args]  # fmt: skip
            self.processes.append(subprocess.Popen(command, preexec_fn=_die_with_parent))
            self.ports.append(port)

    def wait_ready(self, timeout_s: float) -> None:
        """Block until every shard answers `/health` with 200; a shard that exits or stays
        unready past `timeout_s` raises RetrievalError naming it."""
        http = urllib3.PoolManager(timeout=urllib3.Timeout(total=2.0), retries=False)
        deadline = time.monotonic() + timeout_s
        for directory, port, process in zip(
            self.directories, self.ports, self.processes, strict=True
        ):
            while True:
                if process.poll() is not None:
                    raise RetrievalError(
                        f"shard server for {directory} exited with code {process.returncode}"
                    )
                with contextlib.suppress(urllib3.exceptions.HTTPError):
                    if http.request("GET", f"http://127.0.0.1:{port}/health").status == 200:
                        break
                if time.monotonic() > deadline:
                    raise RetrievalError(f"shard server for {directory} not ready after "
                                         f"{timeout_s:.0f} s")  # fmt: skip
                time.sleep(0.2)

    def close(self) -> None:
        """Stop every shard server (SIGTERM, then SIGKILL after 10 s)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
        self.processes = []
