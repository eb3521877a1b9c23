"""The `/retrieve` server on 127.0.0.1 (uvicorn in a thread, real HTTP) and the remote client's
retries and timeouts against real local servers that fail on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from searchrl.config.retrieval import RemoteConfig, ServerConfig
from searchrl.retrieval import RemoteRetriever, RetrievalError, Retriever
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.server import create_app
from searchrl.types import Document, Hit

DOCS = [
    Document("d0", '"Eiffel Tower"\nA wrought-iron lattice tower in Paris designed by Eiffel.'),
    Document("d1", '"Mount Everest"\nThe highest mountain on Earth, in the Himalayas.'),
    Document("d2", '"Citibank"\nThe City Bank of New York was founded in 1812.'),
    Document("d3", '"Tea"\nAn aromatic beverage made from the leaves of Camellia sinensis.'),
    Document("d4", '"Paris"\nParis is the capital of France, home of the Eiffel Tower.'),
]
LIMITS = ServerConfig(max_queries=4, max_query_chars=50, max_topk=5, max_body_bytes=2000)


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def wait_healthy(client: httpx.Client, url: str) -> None:
    deadline = time.monotonic() + 10
    while client.get(f"{url}/health").status_code != 200:
        assert time.monotonic() < deadline, "server never became healthy"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    return BM25Retriever.build(DOCS)


@pytest.fixture(scope="module")
def url(bm25: BM25Retriever) -> Iterator[str]:
    with serving(create_app(bm25, LIMITS)) as base, httpx.Client() as client:
        wait_healthy(client, base)
        yield base


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def test_response_shape_with_scores(url: str, client: httpx.Client) -> None:
    body = {"queries": ["Eiffel tower Paris", "highest mountain"], "topk": 2, "return_scores": True}
    response = client.post(f"{url}/retrieve", json=body)
    assert response.status_code == 200
    result = response.json()["result"]
    assert len(result) == 2 and [len(r) for r in result] == [2, 1]
    top = result[0][0]
    assert set(top) == {"document", "score"}
    assert set(top["document"]) == {"id", "contents"}
    assert top["document"]["id"] in {"d0", "d4"} and isinstance(top["score"], float)
    assert result[0][0]["score"] >= result[0][1]["score"]
    assert result[1][0]["document"] == {"id": "d1", "contents": DOCS[1].contents}


def test_without_scores_and_defaults(url: str, client: httpx.Client) -> None:
    for body in ({"queries": ["Eiffel Paris tower"]}, {"queries": ["Eiffel"], "topk": None}):
        result = client.post(f"{url}/retrieve", json=body).json()["result"]
        assert all(set(item) == {"document"} for item in result[0])
    result = client.post(f"{url}/retrieve", json={"queries": ["Eiffel Paris"]}).json()["result"]
    assert len(result[0]) == 2  # only two passages mention either word; default topk is 3
    explicit = {"queries": ["tea leaves"], "topk": 1, "return_scores": False}
    assert client.post(f"{url}/retrieve", json=explicit).json() == {
        "result": [[{"document": {"id": "d3", "contents": DOCS[3].contents}}]]
    }


def test_empty_queries_get_empty_lists(url: str, client: httpx.Client) -> None:
    body = {"queries": ["", "Citibank", "   "], "return_scores": True}
    result = client.post(f"{url}/retrieve", json=body).json()["result"]
    assert result[0] == [] and result[2] == [] and result[1][0]["document"]["id"] == "d2"
    assert client.post(f"{url}/retrieve", json={"queries": []}).json() == {"result": []}


@pytest.mark.parametrize(
    ("content", "status", "message"),
    [
        (
            b'{"queries": ["a", "b", "c", "d", "e"]}',
            422,
            "5 queries in one request; the limit is 4",
        ),
        (b'{"queries": ["' + b"x" * 51 + b'"]}', 422, "queries[0] has 51 characters"),
        (b'{"queries": ["a"], "topk": 0}', 422, "'topk' must be an integer from 1 to 5, got 0"),
        (b'{"queries": ["a"], "topk": 6}', 422, "got 6"),
        (b'{"queries": ["a"], "topk": "3"}', 422, "got '3'"),
        (b'{"queries": ["a"], "topk": true}', 422, "got True"),
        (b'{"queries": ["a"], "return_scores": "yes"}', 422, "'return_scores' must be true"),
        (b'{"topk": 3}', 422, "'queries' is required and must be a list of strings"),
        (b'{"queries": "a"}', 422, "'queries' is required"),
        (b'{"queries": [1]}', 422, "'queries' is required"),
        (b'["a"]', 422, "must be a JSON object"),
        (b'{"queries": [', 400, "not valid JSON"),
        (b"", 400, "not valid JSON"),
        (b'{"queries": ["\xff\xfe"]}', 400, "not valid UTF-8"),
        (b'{"queries": ["' + b"a" * 3000 + b'"]}', 413, "exceeds the 2000-byte limit"),
    ],
)
def test_bad_input_gets_4xx_with_message(
    url: str, client: httpx.Client, content: bytes, status: int, message: str
) -> None:
    response = client.post(
        f"{url}/retrieve", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    assert message in response.json()["detail"]


def test_health_and_stats(url: str, client: httpx.Client) -> None:
    assert client.get(f"{url}/health").json()["status"] == "ok"
    before = client.get(f"{url}/stats").json()
    client.post(f"{url}/retrieve", json={"queries": ["tea", "bank"]})
    client.post(f"{url}/retrieve", json={"queries": ["tea"], "topk": 0})
    after = client.get(f"{url}/stats").json()
    assert after["requests"] == before["requests"] + 2
    assert after["queries"] == before["queries"] + 2
    assert after["errors"] == before["errors"] + 1
    assert after["latency_ms"]["p99"] >= after["latency_ms"]["p50"] > 0


def test_health_is_503_until_loaded_and_on_load_error(bm25: BM25Retriever) -> None:
    release = threading.Event()

    def slow_loader() -> Retriever:
        release.wait(10)
        return bm25

    with serving(create_app(slow_loader)) as base, httpx.Client() as client:
        assert client.get(f"{base}/health").status_code == 503
        assert client.get(f"{base}/health").json() == {"status": "loading"}
        busy = client.post(f"{base}/retrieve", json={"queries": ["tea"]})
        assert busy.status_code == 503 and "loading" in busy.json()["detail"]
        release.set()
        wait_healthy(client, base)
        assert client.post(f"{base}/retrieve", json={"queries": ["tea"]}).status_code == 200

    def broken_loader() -> Retriever:
        raise RetrievalError("no such index")

    with serving(create_app(broken_loader)) as base, httpx.Client() as client:
        deadline = time.monotonic() + 10
        while (health := client.get(f"{base}/health").json())["status"] == "loading":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert health == {"status": "error", "detail": "RetrievalError: no such index"}


class CountingRetriever:
    """Records the size of every batched search call it receives."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append(len(queries))
        time.sleep(0.05)
        return self.inner.search(queries, k)


def test_concurrent_requests_are_micro_batched(bm25: BM25Retriever) -> None:
    counting = CountingRetriever(bm25)
    queries = ["Eiffel", "mountain", "bank", "tea", "Paris", "Himalayas", "1812", "leaves"]
    app = create_app(counting, ServerConfig(batch_window_ms=20))
    with serving(app) as base:
        wait_healthy(httpx.Client(), base)

        async def fire() -> list[Any]:
            async with httpx.AsyncClient() as aclient:
                posts = [
                    aclient.post(f"{base}/retrieve", json={"queries": [q], "topk": 1})
                    for q in queries
                ]
                return [r.json()["result"][0] for r in await asyncio.gather(*posts)]

        results = asyncio.run(fire())
    expected = [[h.document.id for h in hits] for hits in bm25.search(queries, 1)]
    assert [[item["document"]["id"] for item in r] for r in results] == expected
    assert sum(counting.calls) == len(queries)
    assert len(counting.calls) < len(queries)


def test_remote_client_matches_in_process(url: str, bm25: BM25Retriever) -> None:
    queries = ["Eiffel tower", "", "New York bank", "tea", "highest mountain Earth"]
    config = RemoteConfig(url=f"{url}/retrieve", max_queries_per_request=2)
    with RemoteRetriever(config) as remote:
        assert remote.search(queries, 2) == bm25.search(queries, 2)


def flaky_app(failures: int, attempts: list[float], delay_s: float = 0.0) -> FastAPI:
    """Answers 500 `failures` times (or sleeps `delay_s`), then a valid one-document result."""
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve() -> JSONResponse:
        attempts.append(time.monotonic())
        if len(attempts) <= failures:
            if delay_s:
                await asyncio.sleep(delay_s)
            else:
                return JSONResponse({"detail": "boom"}, status_code=500)
        doc = {"id": "x", "contents": '"X"\nfound'}
        return JSONResponse({"result": [[{"document": doc, "score": 1.5}]]})

    @app.post("/reject")
    async def reject() -> JSONResponse:
        attempts.append(time.monotonic())
        return JSONResponse({"detail": "topk too large"}, status_code=422)

    return app


def remote(url: str, **kwargs: Any) -> RemoteRetriever:
    return RemoteRetriever(RemoteConfig(url=url, backoff_s=0.05, **kwargs))


def test_retries_5xx_with_backoff_then_succeeds() -> None:
    attempts: list[float] = []
    with serving(flaky_app(2, attempts)) as base, remote(f"{base}/retrieve", retries=3) as client:
        assert client.search(["q"], 3) == [[Hit(Document("x", '"X"\nfound'), 1.5)]]
    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1  # exponential backoff


def test_gives_up_after_last_retry_naming_url_and_attempts() -> None:
    attempts: list[float] = []
    with (
        serving(flaky_app(5, attempts)) as base,
        remote(f"{base}/retrieve", retries=1) as client,
        pytest.raises(RetrievalError, match=rf"{base}/retrieve failed after 2 attempt\(s\)"),
    ):
        client.search(["q"], 3)
    assert len(attempts) == 2


def test_timeout_is_retried_then_reported() -> None:
    attempts: list[float] = []
    with (
        serving(flaky_app(5, attempts, delay_s=1.0)) as base,
        remote(f"{base}/retrieve", retries=1, timeout_s=0.2) as client,
    ):
        started = time.monotonic()
        with pytest.raises(RetrievalError, match=r"timed out after 0\.2s"):
            client.search(["q"], 3)
        assert time.monotonic() - started < 1.5
    assert len(attempts) == 2


def test_client_errors_are_not_retried_and_refused_connections_are() -> None:
    attempts: list[float] = []
    with (
        serving(flaky_app(0, attempts)) as base,
        remote(f"{base}/reject", retries=3) as client,
        pytest.raises(RetrievalError, match="refused the request: HTTP 422"),
    ):
        client.search(["q"], 3)
    assert len(attempts) == 1
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with (
        remote(f"http://127.0.0.1:{port}/retrieve", retries=2) as client,
        pytest.raises(RetrievalError, match="failed after 3 attempt"),
    ):
        client.search(["q"], 3)


def test_malformed_responses_are_retrieval_errors(url: str) -> None:
    with remote(f"{url}/health", retries=0) as client, pytest.raises(RetrievalError):
        client.search(["q"], 3)
    with remote(url) as client, pytest.raises(ValueError, match="k must be at least 1"):
        client.search(["q"], 0)
