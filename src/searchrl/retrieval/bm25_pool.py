"""Batched BM25 search on several cores: helper processes that open the same index.

One BM25 query is a few milliseconds of numpy calls on small arrays, most of them holding the
GIL, so threads do not add cores; processes do. Every helper opens the index from disk as the
parent did (the score arrays and passages are memory-mapped, so the page cache holds one copy
for all of them) and answers chunks of each batch with (rows, scores) arrays; the parent
answers the chunks no helper has taken yet and turns rows into passages. The answer is the
same as one process's: each query is ranked alone, by the same code, over the same files.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import numpy as np

from searchrl.config.retrieval import BM25Config

Ranked = tuple[np.ndarray, np.ndarray]
"""One query's top k: passage rows and their scores, best first."""

_opened: Callable[[Sequence[str], int], list[Ranked]] | None = None
"""In a helper process: the `rank` method of the index it opened."""


def _open(directory: str, config: BM25Config) -> None:
    """Helper initializer: one thread of numpy (the cores are the helpers), then the index."""
    os.environ["OMP_NUM_THREADS"] = "1"
    from searchrl.retrieval.bm25 import BM25Retriever

    global _opened
    _opened = BM25Retriever.load(directory, config).rank


def _rank(queries: Sequence[str], k: int) -> list[Ranked]:
    if _opened is None:
        raise RuntimeError("search helper used before its index was opened")
    return _opened(queries, k)


CHUNKS_PER_PROCESS = 8
"""A batch is cut into about this many chunks per process (this one and each helper)."""


class SearchPool:
    """`helpers` processes, each with the index at `directory` open under `config`."""

    def __init__(self, directory: Path, config: BM25Config, helpers: int) -> None:
        # spawn, not fork: a server's parent has threads (uvicorn, the micro-batcher), and a
        # forked child of a threaded process may inherit a held lock
        self.helpers = helpers
        self._executor = ProcessPoolExecutor(
            helpers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_open,
            initargs=(str(directory), config),
        )
        # open the index in every helper now, so a broken one fails here, not mid-request
        warm = [self._executor.submit(_rank, [], 1) for _ in range(helpers)]
        for future in warm:
            future.result()

    def rank(
        self, queries: Sequence[str], k: int, local: Callable[[Sequence[str], int], list[Ranked]]
    ) -> list[Ranked]:
        """Rank `queries` in small chunks shared out as they finish: every chunk is offered
        to the helpers, and this process (`local`) answers chunks from the back of the queue
        that no helper has taken yet. At 21M passages a query takes 1 ms at the median and
        up to 0.5 s for long multi-hop questions, so fixed halves left one process idle."""
        size = max(1, len(queries) // (CHUNKS_PER_PROCESS * (self.helpers + 1)))
        chunks = [list(queries[i : i + size]) for i in range(0, len(queries), size)]
        futures: list[Future[list[Ranked]]] = [
            self._executor.submit(_rank, chunk, k) for chunk in chunks
        ]
        answered: dict[int, list[Ranked]] = {}
        for i in reversed(range(len(chunks))):
            if not futures[i].cancel():  # a helper has it, and all chunks before it
                break
            answered[i] = local(chunks[i], k)
        ranked: list[Ranked] = []
        for i, future in enumerate(futures):
            ranked.extend(answered[i] if i in answered else future.result())
        return ranked

    def close(self) -> None:
        """Stop the helpers (also done at interpreter exit)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
