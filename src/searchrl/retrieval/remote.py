"""Client for any server speaking Search-R1's `POST /retrieve` contract (ours or the original).

Search-R1 called its server with no timeout and no retry, so one stalled request froze a whole
training step. Here every attempt has a deadline (`timeout_s` for the whole attempt, so a server
trickling bytes cannot stretch it), connection errors / timeouts / 5xx / unparseable answers are
retried with exponential backoff, each failed attempt is one warning line in the log, and the
last failure raises a RetrievalError naming URL and attempts. The longest a request can take is
therefore `(retries + 1) * timeout_s + backoff_s * (2**retries - 1)`.

Transport: urllib3's connection pool and orjson. A training step makes one request per rollout
turn, so per-request client cost adds up: on the 2-core machine httpx spent ~1.4 ms of CPU per
16-query request and urllib3 ~0.7 ms (see `benchmarks/retrieval/retrieval.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import orjson
import urllib3
from urllib3.exceptions import HTTPError as TransportError
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as TransportTimeout

from searchrl.config.retrieval import RemoteConfig
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import document_from_row
from searchrl.types import Hit

log = logging.getLogger("searchrl.retrieval.remote")


class _Retryable(Exception):
    """An attempt failed in a way another attempt may fix."""


class RemoteRetriever:
    """A Retriever backed by HTTP; one pooled connection set per instance."""

    def __init__(self, config: RemoteConfig | str | None = None) -> None:
        """`config` may be a bare URL string: the other settings then take their defaults."""
        if isinstance(config, str):
            config = RemoteConfig(url=config)
        self.config = config or RemoteConfig()
        self._pool = urllib3.PoolManager(
            maxsize=4, timeout=urllib3.Timeout(total=self.config.timeout_s), retries=False
        )

    def close(self) -> None:
        """Close pooled connections."""
        self._pool.clear()

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
        for attempt in range(attempts):
            try:
                return self._attempt(payload, len(queries))
            except _Retryable as err:
                if attempt + 1 == attempts:
                    message = (
                        f"retrieval server {self.config.url} failed after {attempts} attempt(s): "
                        f"{err}"
                    )
                    log.error("%s", message)
                    raise RetrievalError(message) from None
                wait = self.config.backoff_s * 2**attempt
                log.warning(
                    "retrieval server %s: attempt %d/%d failed (%s); retrying in %.1f s",
                    self.config.url, attempt + 1, attempts, err, wait,
                )  # fmt: skip
                time.sleep(wait)
        raise AssertionError("unreachable")

    def _attempt(self, payload: dict[str, Any], n_queries: int) -> list[list[Hit]]:
        try:
            response = self._pool.request(
                "POST",
                self.config.url,
                body=orjson.dumps(payload),
                headers={"Content-Type": "application/json"},
            )
        except NewConnectionError as err:  # a subclass of urllib3's TimeoutError
            raise _Retryable(f"cannot connect: {err}") from err
        except TransportTimeout as err:
            raise _Retryable(
                f"timed out after {self.config.timeout_s}s ({type(err).__name__})"
            ) from err
        except TransportError as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from err
        body = response.data
        if response.status >= 500:
            raise _Retryable(f"HTTP {response.status}: {body[:200].decode(errors='replace')}")
        if response.status >= 400:
            raise RetrievalError(
                f"retrieval server {self.config.url} refused the request: HTTP "
                f"{response.status}: {body[:500].decode(errors='replace')}"
            )
        return self._parse(body, n_queries)

    def _parse(self, body: bytes, n_queries: int) -> list[list[Hit]]:
        where = f"response from {self.config.url}"
        try:
            result = orjson.loads(body)["result"]
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
            raise _Retryable(f"malformed {where}: {err}") from None
