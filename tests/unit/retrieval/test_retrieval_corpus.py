"""Corpus reading: both row formats, every malformed case with file:line, fingerprints, and the
memory-mapped document store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from retrieval_helpers import write_jsonl

from searchrl.retrieval.corpus import (
    CorpusError,
    CorpusReader,
    fingerprint_documents,
    fingerprint_file,
    read_corpus,
)
from searchrl.retrieval.store import DocumentStore, write_store
from searchrl.types import Document


def test_reads_contents_rows_and_ignores_extra_keys(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [{"id": "1", "contents": '"Paris"\nCapital of France.', "source": "x"}],
    )
    (doc,) = read_corpus(path)
    assert doc == Document("1", '"Paris"\nCapital of France.')
    assert doc.title == '"Paris"'
    assert doc.text == "Capital of France."


def test_title_text_rows_get_quoted_titles(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"id": "a", "title": "Paris", "text": "Capital."},
            {"id": "b", "title": '"Rome"', "text": "Also a capital."},
        ],
    )
    docs = read_corpus(path)
    assert [d.contents for d in docs] == ['"Paris"\nCapital.', '"Rome"\nAlso a capital.']


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "contents": "\\"A\\"\\na"}\n\n{"id": 2}\n')
    with pytest.raises(CorpusError, match=r"c\.jsonl:3: 'id' must be a string"):
        read_corpus(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "1", "contents": ', r":2: malformed JSON"),
        ('["not", "an", "object"]', r":2: expected a JSON object, got list"),
        ('{"contents": "x"}', r":2: missing field 'id'"),
        ('{"id": 7, "contents": "x"}', r":2: 'id' must be a string, got int"),
        ('{"id": "7", "contents": ["x"]}', r":2: 'contents' must be a string, got list"),
        ('{"id": "7"}', r":2: missing field 'contents' \(or the pair 'title' and 'text'\)"),
        ('{"id": "7", "title": "T", "text": 3}', r":2: 'title' and 'text' must be strings"),
        ('{"id": "0", "contents": "again"}', r":2: duplicate id '0' \(first seen on line 1\)"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "0", "contents": "\\"T\\"\\nfine"}\n' + line + "\n")
    with pytest.raises(CorpusError, match=r"bad\.jsonl" + message):
        read_corpus(path)


def test_invalid_utf8_is_a_corpus_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"id": "1", "contents": "\xff"}\n')
    with pytest.raises(CorpusError, match=r"bin\.jsonl:1: not valid UTF-8"):
        read_corpus(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_corpus_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(CorpusError, match=r"empty\.jsonl: the corpus is empty"):
        read_corpus(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="corpus file not found"):
        read_corpus(tmp_path / "nope.jsonl")


def test_corpus_error_is_a_value_error() -> None:
    assert issubclass(CorpusError, ValueError)


def test_fingerprint_tracks_bytes_and_rows(tmp_path: Path, corpus_file: Path) -> None:
    reader = CorpusReader(corpus_file)
    docs = list(reader)
    assert reader.fingerprint == fingerprint_file(corpus_file)
    assert reader.fingerprint is not None and reader.fingerprint.rows == len(docs) == 8
    # The canonical form written by json.dumps(ensure_ascii=False) hashes the same either way.
    assert fingerprint_documents(docs) == reader.fingerprint
    changed = tmp_path / "changed.jsonl"
    changed.write_text(corpus_file.read_text().replace("1889", "1890"))
    assert fingerprint_file(changed).sha256 != reader.fingerprint.sha256


def test_store_round_trip_random_access(tmp_path: Path, small_docs: list[Document]) -> None:
    assert write_store(small_docs, tmp_path) == len(small_docs)
    store = DocumentStore(tmp_path)
    assert len(store) == len(small_docs)
    assert list(store) == small_docs
    assert store[-1] == small_docs[-1]
    assert "東京" in store[7].contents
    assert store[2:4] == small_docs[2:4]
    with pytest.raises(IndexError):
        store[len(small_docs)]
    first = json.loads((tmp_path / "documents.jsonl").read_text().splitlines()[0])
    assert first == {"id": small_docs[0].id, "contents": small_docs[0].contents}
