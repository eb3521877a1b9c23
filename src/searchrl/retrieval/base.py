"""The one retrieval interface. BM25, dense, hybrid and remote retrievers all satisfy it, so the
rollout engine, the server and evaluation never know which one they hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from searchrl.types import Hit
from searchrl.utils.errors import SearchRLError


class RetrievalError(SearchRLError, RuntimeError):
    """Raised when a retriever cannot answer (e.g. the remote server failed after retries)."""


@runtime_checkable
class Retriever(Protocol):
    """Batched search: one ranked list of hits (best first, at most k) per query, in order."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...
