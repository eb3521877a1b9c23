"""The passages an index returns, stored next to it: one canonical JSONL file plus an int64
offsets array, both memory-mapped, so opening a 21M-passage store is instant and a lookup
decodes only the rows a search returns."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np

from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import canonical_line
from searchrl.types import Document

DOCS_FILE = "documents.jsonl"
OFFSETS_FILE = "documents.offsets.npy"


def write_store(docs: Iterable[Document], out_dir: str | Path) -> int:
    """Write `docs` in order (row i = faiss/BM25 id i) and return how many were written. The
    store of another index is hard-linked, not copied (21M passages are ~5-13 GB; stores are
    never changed in place, so sharing the files is safe)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shared = isinstance(docs, DocumentStore)
    if shared and (docs.directory.resolve() == out.resolve() or _link(docs.directory, out)):
        return len(docs)  # type: ignore[arg-type]
    offsets = [0]
    with (out / DOCS_FILE).open("wb") as handle:
        for doc in docs:
            line = canonical_line(doc)
            handle.write(line)
            offsets.append(offsets[-1] + len(line))
    np.save(out / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    return len(offsets) - 1


def _link(source: Path, out: Path) -> bool:
    """Hard-link a store's two files into `out`; False (nothing left behind) where the
    filesystem refuses, e.g. across devices."""
    made = []
    try:
        for name in (DOCS_FILE, OFFSETS_FILE):
            os.link(source / name, out / name)
            made.append(out / name)
    except OSError:
        for path in made:
            path.unlink()
        return False
    return True


class DocumentStore(Sequence[Document]):
    """Read-only, random-access view of a written store (a Sequence, like a list of Documents)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        docs_path = self.directory / DOCS_FILE
        offsets_path = self.directory / OFFSETS_FILE
        if not docs_path.is_file() or not offsets_path.is_file():
            raise RetrievalError(f"{self.directory}: no document store ({DOCS_FILE} missing)")
        self._offsets = np.load(offsets_path, mmap_mode="r")
        size = docs_path.stat().st_size
        if int(self._offsets[-1]) != size:
            raise RetrievalError(
                f"{docs_path}: size {size} does not match its offsets ({int(self._offsets[-1])});"
                " the index directory is corrupt or half-written"
            )
        with docs_path.open("rb") as handle:
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> Document: ...

    @overload
    def __getitem__(self, index: slice) -> list[Document]: ...

    def __getitem__(self, index: int | slice) -> Document | list[Document]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"document row {index} out of range 0..{len(self) - 1}")
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        row = json.loads(self._data[start:end])
        return Document(id=row["id"], contents=row["contents"])

    def __iter__(self) -> Iterator[Document]:
        for i in range(len(self)):
            yield self[i]
