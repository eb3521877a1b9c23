"""Micro-batching and request statistics for the retrieval server.

A dense encoder costs nearly as much for one query as for sixteen, so requests that arrive
within a few milliseconds of each other are merged into one `search` call. The search runs in
a worker thread so the event loop keeps accepting requests while it computes; requests that
arrive meanwhile form the next batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from searchrl.config.retrieval import ServerConfig
from searchrl.retrieval.base import Retriever
from searchrl.types import Hit

log = logging.getLogger("searchrl.retrieval.server")


@dataclass
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Hit]]] = field(repr=False)


class RequestStats:
    """Counts and recent latencies of `/retrieve` requests, for `/stats` and periodic logs."""

    def __init__(self, window: int, log_every: int = 1000) -> None:
        self.requests = 0
        self.queries = 0
        self.errors = 0
        self.batches = 0
        self.batched_queries = 0
        self.log_every = log_every
        self._latencies: deque[float] = deque(maxlen=window)
        self._started = time.time()

    @contextlib.contextmanager
    def timed(self) -> Iterator[Callable[[int, int], None]]:
        """Time one request; call the yielded function with (HTTP status, query count)."""
        started = time.perf_counter()
        outcome = {"status": 500, "queries": 0}

        def record(status: int, queries: int) -> None:
            outcome.update(status=status, queries=queries)

        try:
            yield record
        finally:
            self._latencies.append(time.perf_counter() - started)
            self.requests += 1
            self.queries += outcome["queries"]
            self.errors += outcome["status"] >= 400
            if self.requests % self.log_every == 0:
                summary = self.summary()
                log.info(
                    "%d requests (%d errors), %d queries; latency p50 %.1f ms, p99 %.1f ms",
                    self.requests,
                    self.errors,
                    self.queries,
                    summary["latency_ms"]["p50"],
                    summary["latency_ms"]["p99"],
                )

    def note_batch(self, queries: int) -> None:
        """Count one batched search call of `queries` queries."""
        self.batches += 1
        self.batched_queries += queries

    def summary(self) -> dict[str, Any]:
        """JSON-ready counters and latency percentiles over the recent window."""
        ordered = sorted(self._latencies)

        def pct(p: float) -> float:
            if not ordered:
                return 0.0
            return 1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))]

        return {
            "requests": self.requests,
            "queries": self.queries,
            "errors": self.errors,
            "batches": self.batches,
            "mean_batch_queries": self.batched_queries / self.batches if self.batches else 0.0,
            "uptime_s": time.time() - self._started,
            "latency_ms": {"p50": pct(0.50), "p99": pct(0.99), "window": len(ordered)},
        }


class MicroBatcher:
    """Merges concurrent `search` calls into batched retriever calls (one at a time)."""

    def __init__(self, retriever: Retriever, config: ServerConfig, stats: RequestStats) -> None:
        self.retriever = retriever
        self.window_s = config.batch_window_ms / 1000
        self.max_queries = config.max_batch_queries
        self.inline_ms = config.inline_search_ms
        self.stats = stats
        self._per_query_s = float("inf")
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._worker = asyncio.create_task(self._run())

    async def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Queue the queries and wait for their share of a batched search."""
        if not queries:
            return []
        future: asyncio.Future[list[list[Hit]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(queries, k, future))
        return await future

    async def close(self) -> None:
        """Stop the worker; requests still queued get an error instead of hanging."""
        self._worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._worker
        while not self._queue.empty():
            pending = self._queue.get_nowait()
            if not pending.future.done():
                pending.future.set_exception(RuntimeError("the server is shutting down"))

    async def _gather(self) -> list[_Pending]:
        batch = [await self._queue.get()]
        size = len(batch[0].queries)
        deadline = asyncio.get_running_loop().time() + self.window_s
        while size < self.max_queries:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                if self._queue.empty() and remaining > 0:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                else:
                    item = self._queue.get_nowait()
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            batch.append(item)
            size += len(item.queries)
        return batch

    async def _search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Search on the event loop when the last batch says it will take less than
        `inline_search_ms` (BM25: under 1 ms a query; a thread hand-off costs ~1 ms of CPU),
        else in a worker thread so the loop keeps accepting requests meanwhile (dense)."""
        started = time.perf_counter()
        if self._per_query_s * len(queries) * 1000 < self.inline_ms:
            results = self.retriever.search(queries, k)
        else:
            results = await asyncio.to_thread(self.retriever.search, queries, k)
        self._per_query_s = (time.perf_counter() - started) / len(queries)
        return results

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            for k in sorted({p.k for p in batch}):
                group = [p for p in batch if p.k == k]
                queries = [q for p in group for q in p.queries]
                try:
                    results = await self._search(queries, k)
                except Exception as err:
                    for pending in group:
                        if not pending.future.done():
                            pending.future.set_exception(err)
                    continue
                self.stats.note_batch(len(queries))
                start = 0
                for pending in group:
                    if not pending.future.done():
                        pending.future.set_result(results[start : start + len(pending.queries)])
                    start += len(pending.queries)
