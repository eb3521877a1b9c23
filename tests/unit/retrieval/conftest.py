"""Fixtures for the retrieval tests: the small corpus on disk and parsed."""

from __future__ import annotations

from pathlib import Path

import pytest
from retrieval_helpers import PASSAGES, write_jsonl

from searchrl.retrieval.corpus import read_corpus
from searchrl.types import Document


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small corpus as `{"id", "contents"}` JSONL (ids are the PASSAGES keys)."""
    rows = [{"id": key, "contents": f'"{t}"\n{text}'} for key, (t, text) in PASSAGES.items()]
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", rows)


@pytest.fixture(scope="session")
def other_corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different corpus (one passage less), to check that indexes refuse it."""
    rows = [{"id": k, "contents": f'"{t}"\n{x}'} for k, (t, x) in list(PASSAGES.items())[1:]]
    return write_jsonl(tmp_path_factory.mktemp("other") / "corpus.jsonl", rows)


@pytest.fixture(scope="session")
def small_docs(corpus_file: Path) -> list[Document]:
    """The small corpus, parsed."""
    return read_corpus(corpus_file)
