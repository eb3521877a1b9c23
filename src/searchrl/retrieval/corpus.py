"""Reading the passage corpus: Search-R1/FlashRAG JSONL, streamed, with errors that point at
the exact file and line, and a fingerprint that ties an index to the corpus it was built from.

Accepted rows: `{"id", "contents"}` (the wiki-18 convention, title in double quotes on the first
line of contents) or `{"id", "title", "text"}` (converted to `"Title"\\ntext`). Extra keys such
as `source` are ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.types import Document
from searchrl.utils.errors import SearchRLError


class CorpusError(SearchRLError, ValueError):
    """The corpus file is unreadable or a row breaks the format; the message names file:line."""


@dataclass(frozen=True)
class CorpusFingerprint:
    """Identity of a corpus: sha256 of its bytes and its row count (an index records it so a
    different corpus is refused at load time)."""

    sha256: str
    rows: int


def _quoted_title(title: str) -> str:
    title = title.strip()
    if len(title) >= 2 and title.startswith('"') and title.endswith('"'):
        return title
    return f'"{title}"'


def document_from_row(row: Any, where: str) -> Document:
    """Turn one decoded JSON row into a Document; `where` ("file:line") goes into every error."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "id" not in row:
        raise CorpusError(f"{where}: missing field 'id'")
    doc_id = row["id"]
    if not isinstance(doc_id, str):
        raise CorpusError(f"{where}: 'id' must be a string, got {type(doc_id).__name__}")
    if "contents" in row:
        contents = row["contents"]
        if not isinstance(contents, str):
            raise CorpusError(
                f"{where}: 'contents' must be a string, got {type(contents).__name__}"
            )
        return Document(id=doc_id, contents=contents)
    if "title" in row and "text" in row:
        title, text = row["title"], row["text"]
        if not isinstance(title, str) or not isinstance(text, str):
            raise CorpusError(f"{where}: 'title' and 'text' must be strings")
        return Document(id=doc_id, contents=f"{_quoted_title(title)}\n{text}")
    raise CorpusError(f"{where}: missing field 'contents' (or the pair 'title' and 'text')")


class CorpusReader:
    """Streams Documents from a JSONL file once, hashing the bytes as they go by.

    After iteration ends, `fingerprint` is set; duplicate ids are reported with both line
    numbers. Memory holds only the id → line map, not the passages.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.fingerprint: CorpusFingerprint | None = None

    def __iter__(self) -> Iterator[Document]:
        if not self.path.is_file():
            raise CorpusError(f"corpus file not found: {self.path}")
        digest = hashlib.sha256()
        seen: dict[str, int] = {}
        with self.path.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                digest.update(raw)
                if not raw.strip():
                    continue
                doc = self._parse(raw, line_no)
                first = seen.setdefault(doc.id, line_no)
                if first != line_no:
                    raise CorpusError(
                        f"{self.path}:{line_no}: duplicate id {doc.id!r} (first seen on line "
                        f"{first})"
                    )
                yield doc
        if not seen:
            raise CorpusError(f"{self.path}: the corpus is empty (no JSON rows)")
        self.fingerprint = CorpusFingerprint(sha256=digest.hexdigest(), rows=len(seen))

    def _parse(self, raw: bytes, line_no: int) -> Document:
        where = f"{self.path}:{line_no}"
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise CorpusError(f"{where}: not valid UTF-8 ({err.reason})") from None
        except json.JSONDecodeError as err:
            raise CorpusError(
                f"{where}: malformed JSON ({err.msg} at column {err.colno})"
            ) from None
        return document_from_row(row, where)


def read_corpus(path: str | Path) -> list[Document]:
    """Load a whole corpus into memory (for small corpora and tests; indexing streams)."""
    return list(CorpusReader(path))


def fingerprint_file(path: str | Path) -> CorpusFingerprint:
    """Fingerprint a corpus file without keeping its passages (used to check an index)."""
    reader = CorpusReader(path)
    for _ in reader:
        pass
    assert reader.fingerprint is not None
    return reader.fingerprint


def canonical_line(doc: Document) -> bytes:
    """The `{"id","contents"}` JSONL line an index stores for a document."""
    row = {"id": doc.id, "contents": doc.contents}
    return (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")


def fingerprint_documents(docs: Iterable[Document]) -> CorpusFingerprint:
    """Fingerprint documents built in memory: the sha256 of their canonical JSONL lines, which
    equals `fingerprint_file` of a file written in that canonical form."""
    digest = hashlib.sha256()
    rows = 0
    for doc in docs:
        digest.update(canonical_line(doc))
        rows += 1
    return CorpusFingerprint(sha256=digest.hexdigest(), rows=rows)
