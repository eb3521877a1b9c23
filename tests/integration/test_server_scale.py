"""The `/retrieve` server at Search-R1's batch size and its published schema: one request with
every query of a paper-sized rollout step (512 prompts × 5 samples = 2,560), searched in parts
of `max_batch_queries`, and a request schema in `/openapi.json` generated from the same
pydantic model that validates requests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from test_server import DOCS, serving, wait_healthy

from searchrl.config.retrieval import ServerConfig
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.server import create_app

WORDS = {"Paris": "d4", "Himalayas": "d1", "Citibank": "d2", "Camellia": "d3", "lattice": "d0"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(create_app(BM25Retriever.build(DOCS), ServerConfig())) as base:
        with httpx.Client() as client:
            wait_healthy(client, base)
        yield base


def test_answers_a_2560_query_request_in_order(url: str) -> None:
    words = list(WORDS)
    queries = [f"{words[i % len(words)]} {i}" for i in range(2560)]
    body = {"queries": queries, "topk": 3, "return_scores": True}  # Search-R1's batch_search
    with httpx.Client(timeout=120) as client:
        response = client.post(f"{url}/retrieve", json=body)
        stats = client.get(f"{url}/stats").json()
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert len(result) == 2560
    assert all(1 <= len(hits) <= 3 and "score" in hits[0] for hits in result)
    assert [hits[0]["document"]["id"] for hits in result] == [WORDS[q.split()[0]] for q in queries]
    assert stats["batches"] == 3 and stats["queries"] == 2560  # 1024 + 1024 + 512


def test_limit_is_far_above_the_papers_batch_and_named_when_exceeded(url: str) -> None:
    too_many = {"queries": ["tea"] * (ServerConfig().max_queries + 1)}
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{url}/retrieve", json=too_many)
    assert ServerConfig().max_queries >= 3 * 2560
    assert response.status_code == 422
    assert response.json()["detail"] == "8193 queries in one request; the limit is 8192"


def test_openapi_describes_retrieve(url: str) -> None:
    spec = httpx.get(f"{url}/openapi.json").json()
    post = spec["paths"]["/retrieve"]["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert post["requestBody"]["required"] is True
    assert schema["required"] == ["queries"]
    props = schema["properties"]
    assert props["queries"]["maxItems"] == 8192
    assert props["queries"]["items"] == {"maxLength": 2000, "type": "string"}
    assert {"maximum": 100, "minimum": 1, "type": "integer"} in props["topk"]["anyOf"]
    assert props["return_scores"]["type"] == "boolean"
    ok = post["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/RetrieveResponse"}
    assert "RetrievedItem" in spec["components"]["schemas"]
