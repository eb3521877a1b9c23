"""Fixtures for the evaluation tests: the rollout tests' scripted backend and in-memory
retriever (shared, not copied), a few documents, and one torch thread per module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from searchrl.types import Document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))


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
        Document("d5", '"Gustave Eiffel"\nGustave Eiffel was born in Dijon.'),
    ]
