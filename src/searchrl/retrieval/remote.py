"""Client for any server speaking Search-R1's `POST /retrieve` contract (ours or the original).

Search-R1 called its server with no timeout and no retry, so one stalled request froze a whole
training step. Here every attempt has a timeout, connection errors / timeouts / 5xx are retried
with exponential backoff, and the last failure raises a RetrievalError naming URL and attempts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from searchrl.config.retrieval import RemoteConfig
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import document_from_row
from searchrl.types import Hit


class _Retryable(Exception):
    """An attempt failed in a way another attempt may fix."""


class RemoteRetriever:
    """A Retriever backed by HTTP; one pooled connection set per instance."""

    def __init__(self, config: RemoteConfig | str | None = None) -> None:
        """`config` may be a bare URL string: the other settings then take their defaults."""
        if isinstance(config, str):
            config = RemoteConfig(url=config)
        self.config = config or RemoteConfig()
        self._client = httpx.Client(timeout=self.config.timeout_s)

    def close(self) -> None:
        """Close pooled connections."""
        self._client.close()

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Send the queries (split into requests of at most `max_queries_per_request`)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        step = self.config.max_queries_per_request
        results: list[list[Hit]] = []
        for start in range(0, len(queries), step):
            results.extend(self._request(list(queries[start : start + step]), k))
        return results

    def _request(self, queries: list[str], k: int) -> list[list[Hit]]:
        payload = {"queries": queries, "topk": k, "return_scores": True}
        attempts = self.config.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                return self._attempt(payload, len(queries))
            except _Retryable as err:
                last = str(err)
        raise RetrievalError(
            f"retrieval server {self.config.url} failed after {attempts} attempt(s): {last}"
        )

    def _attempt(self, payload: dict[str, Any], n_queries: int) -> list[list[Hit]]:
        try:
            response = self._client.post(self.config.url, json=payload)
        except httpx.TimeoutException as err:
            raise _Retryable(
                f"timed out after {self.config.timeout_s}s ({type(err).__name__})"
            ) from err
        except httpx.TransportError as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from err
        if response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code >= 400:
            raise RetrievalError(
                f"retrieval server {self.config.url} refused the request: HTTP "
                f"{response.status_code}: {response.text[:500]}"
            )
        return self._parse(response, n_queries)

    def _parse(self, response: httpx.Response, n_queries: int) -> list[list[Hit]]:
        where = f"response from {self.config.url}"
        try:
            result = response.json()["result"]
            if not isinstance(result, list) or len(result) != n_queries:
                raise TypeError(f"expected {n_queries} result lists")
            return [
                [
                    Hit(document_from_row(item["document"], where), float(item.get("score", 0.0)))
                    for item in ranking
                ]
                for ranking in result
            ]
        except (ValueError, KeyError, TypeError) as err:
            raise RetrievalError(f"malformed {where}: {err}") from None
