"""Serving a dense index built by Search-R1 or FlashRAG as it is: a faiss index file (e.g.
`e5_Flat.index`), the JSONL corpus it was built from (`wiki-18.jsonl`, row i = faiss id i) and
the encoder that made its vectors (`intfloat/e5-base-v2`). Nothing is rebuilt or copied: the
corpus is memory-mapped and the start of every line is found once at startup with NumPy (about
a second per GB), so the 21M-passage wiki-18 costs ~170 MB of offsets.

The vectors must be L2-normalized for inner product to be cosine, as Search-R1's E5 and BGE
indexes are; E5 "query: " prefixes are on when the encoder name contains "e5".
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, overload

import numpy as np

from searchrl.config.retrieval import DenseConfig
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import CorpusError, document_from_row
from searchrl.retrieval.dense import DenseRetriever, encode_texts, load_encoder
from searchrl.retrieval.manifest import CorpusInfo
from searchrl.types import Document

SCAN_BYTES = 64 * 1024 * 1024


def line_spans(data: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the non-blank lines of a byte buffer, found chunk by chunk so a
    many-GB file never needs more than one chunk of temporary memory."""
    breaks = [np.flatnonzero(np.frombuffer(data[s : s + SCAN_BYTES], dtype=np.uint8) == 10) + s
              for s in range(0, size, SCAN_BYTES)]  # fmt: skip
    ends = np.concatenate([*breaks, np.asarray([size], dtype=np.int64)]).astype(np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    keep = ends - starts > 0
    return starts[keep], ends[keep]


class JsonlCorpus(Sequence[Document]):
    """Random access to the rows of a corpus JSONL file in place (blank lines skipped)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise CorpusError(f"corpus file not found: {self.path}")
        size = self.path.stat().st_size
        if size == 0:
            raise CorpusError(f"{self.path}: the corpus is empty")
        with self.path.open("rb") as handle:
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        starts, ends = line_spans(self._data, size)
        self._starts, self._ends = starts, ends

    def __len__(self) -> int:
        return len(self._starts)

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
            raise IndexError(f"corpus row {index} out of range 0..{len(self) - 1}")
        raw = self._data[int(self._starts[index]) : int(self._ends[index])]
        where = f"{self.path}:row {index + 1}"
        try:
            row = json.loads(raw)
        except ValueError as err:
            raise CorpusError(f"{where}: malformed JSON ({err})") from None
        return document_from_row(row, where)

    def __iter__(self) -> Iterator[Document]:
        for i in range(len(self)):
            yield self[i]


def _index_type(index: Any) -> str:
    """Which of our index kinds a loaded faiss index is, so its search knobs get applied."""
    if hasattr(index, "hnsw"):
        return "hnsw"
    if hasattr(index, "nprobe"):
        return "ivf"
    return "flat"


def open_faiss_index(
    faiss_file: str | Path, corpus_file: str | Path, config: DenseConfig
) -> DenseRetriever:
    """A DenseRetriever over an externally built faiss index and its corpus; refuses a corpus
    whose row count or an encoder whose dimension does not match the index."""
    faiss_file = Path(faiss_file)
    if not faiss_file.is_file():
        raise RetrievalError(f"faiss index file not found: {faiss_file}")
    try:
        import faiss
    except ImportError as err:
        raise RetrievalError(
            f"serving a faiss index needs faiss ({err}): pip install faiss-cpu"
        ) from None
    try:
        index = faiss.read_index(str(faiss_file))
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise RetrievalError(f"{faiss_file}: not a faiss index ({first})") from None
    docs = JsonlCorpus(corpus_file)
    if index.ntotal != len(docs):
        raise RetrievalError(
            f"{faiss_file} holds {index.ntotal:,} vectors but {corpus_file} has {len(docs):,} "
            "rows; give the corpus the index was built from"
        )
    config = replace(config, index_type=_index_type(index))  # type: ignore[arg-type]
    encoder = load_encoder(config)
    # one probe works for every encoder engine (sentence-transformers, CTranslate2)
    dim = encode_texts(encoder, config, ["dimension probe"], passages=False).shape[1]
    if dim != index.d:
        raise RetrievalError(
            f"encoder {config.encoder!r} makes {dim}-dimensional vectors but {faiss_file} holds "
            f"{index.d}-dimensional ones; give the encoder the index was built with"
        )
    corpus = CorpusInfo(sha256="", rows=len(docs), path=str(Path(corpus_file).resolve()))
    return DenseRetriever(encoder, index, docs, config, corpus)


FAISS_KIND = "faiss"
"""The manifest kind of an index directory that links a faiss index built elsewhere."""


def link_faiss_index(
    faiss_file: str | Path, corpus_file: str | Path, out: str | Path, config: DenseConfig
) -> Path:
    """An index directory over a faiss index and its corpus built elsewhere (Search-R1's
    wiki-18 E5 download): only `manifest.json`, naming both files by absolute path and the
    encoder that made the vectors. Nothing is copied or encoded, so `data.index_dir`,
    `searchrl eval --index` and `searchrl serve --index` open the 21M-passage index like any
    of ours; the row count and the encoder's dimension are checked when it is opened."""
    from searchrl.retrieval.manifest import write_manifest

    for path, what in ((faiss_file, "faiss index file"), (corpus_file, "corpus file")):
        if not Path(path).is_file():
            raise RetrievalError(f"{what} not found: {path}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = CorpusInfo(sha256="", rows=0, path=str(Path(corpus_file).resolve()))
    params = {"faiss_index": str(Path(faiss_file).resolve())}
    write_manifest(out, FAISS_KIND, corpus, params, config.encoder)
    return out


def open_linked(directory: str | Path, config: DenseConfig) -> DenseRetriever:
    """Open a directory written by `link_faiss_index` (query-time settings from `config`)."""
    from searchrl.retrieval.manifest import read_manifest

    manifest = read_manifest(directory)
    if manifest.corpus.path is None or manifest.encoder is None:
        raise RetrievalError(f"{directory}: a faiss link needs its corpus path and encoder")
    settings = replace(config, encoder=manifest.encoder)
    return open_faiss_index(manifest.params["faiss_index"], manifest.corpus.path, settings)
