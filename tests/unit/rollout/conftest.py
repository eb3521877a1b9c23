"""Fixtures for the rollout tests: a few documents, and one torch thread per module.
The real tokenizer and the tiny model come from tests/conftest.py."""

from __future__ import annotations

import pytest

from searchrl.types import Document


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread (`tokenizer`, `tiny`: tests/conftest.py)."""


@pytest.fixture
def docs() -> list[Document]:
    return [
        Document("d1", '"Paris"\nParis is the capital of France.'),
        Document("d2", '"France"\nFrance is a country in Europe. Its capital is Paris.'),
        Document("d3", '"Berlin"\nBerlin is the capital of Germany.'),
        Document("d4", '"Eiffel Tower"\nThe Eiffel Tower was designed by Gustave Eiffel.'),
    ]
