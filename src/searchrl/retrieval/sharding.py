"""Building one corpus as N shards whose merged answers equal one index's.

`searchrl index --shards N` writes `shard-000/ … shard-{N-1}/`, each a complete index of a
consecutive slice of the corpus rows (servable alone, on any machine), and a top manifest of
kind "sharded" listing them. Two things make the shards score like one index:

- BM25: the corpus is tokenized once; every shard's scores use the statistics of the whole
  corpus (passages, average length, each term's document frequency), not its slice's, so a
  passage gets the same score in its shard as in an unsharded index;
- ivfpq: one coarse quantizer and one set of PQ codebooks are trained on a sample of the
  whole corpus and shared by every shard, so a query probes the same clusters and gets the
  same approximate scores everywhere. (flat is exact anyway; hnsw and ivf shards are built
  independently and merge approximately.)
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, islice
from pathlib import Path
from typing import overload

from searchrl.config.retrieval import RetrievalConfig
from searchrl.retrieval.bm25 import BM25S_DIR, BM25Retriever, Tokenizer
from searchrl.retrieval.bm25_build import Collection, StreamedBM25Builder
from searchrl.retrieval.corpus import CorpusReader
from searchrl.retrieval.dense import DenseRetriever, EncodedPassages, load_encoder
from searchrl.retrieval.ivfpq import IVFPQBuilder
from searchrl.retrieval.manifest import CorpusInfo, write_manifest
from searchrl.retrieval.store import DOCS_FILE, DocumentStore, write_store
from searchrl.types import Document

SHARD_NAME = "shard-{:03d}"


def shard_bounds(rows: int, shards: int) -> list[int]:
    """Row boundaries of `shards` consecutive slices as equal as possible."""
    return [round(i * rows / shards) for i in range(shards + 1)]


class ConcatenatedDocs(Sequence[Document]):
    """Several document stores read as one sequence (the whole corpus across shards)."""

    def __init__(self, parts: Sequence[Sequence[Document]]) -> None:
        self.parts = list(parts)
        self.starts = [0]
        for part in self.parts:
            self.starts.append(self.starts[-1] + len(part))

    def __len__(self) -> int:
        return self.starts[-1]

    @overload
    def __getitem__(self, index: int) -> Document: ...

    @overload
    def __getitem__(self, index: slice) -> list[Document]: ...

    def __getitem__(self, index: int | slice) -> Document | list[Document]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        for part, start, end in zip(self.parts, self.starts, self.starts[1:], strict=False):
            if start <= index < end:
                return part[index - start]
        raise IndexError(f"row {index} out of range 0..{len(self) - 1}")

    def __iter__(self) -> Iterator[Document]:
        for part in self.parts:
            yield from part


def _count_rows(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _store_info(directory: Path, rows: int) -> CorpusInfo:
    digest = hashlib.sha256()
    with (directory / DOCS_FILE).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return CorpusInfo(digest.hexdigest(), rows)


def build_sharded(
    kind: str,
    corpus_path: Path,
    out: Path,
    config: RetrievalConfig,
    shards: int,
    advance: Callable[[int], None],
) -> None:
    """Write the shards and the top manifest into `out` (a fresh directory)."""
    rows = _count_rows(corpus_path)
    if shards > rows:
        raise ValueError(f"{shards} shards for {rows} passages: at most one shard per passage")
    bounds = shard_bounds(rows, shards)
    reader = CorpusReader(corpus_path)
    documents = iter(reader)
    directories = [out / SHARD_NAME.format(i) for i in range(shards)]
    for directory, start, end in zip(directories, bounds, bounds[1:], strict=False):
        write_store(islice(documents, end - start), directory)
    for _ in documents:  # finish the pass: the fingerprint is set when the reader ends
        pass
    assert reader.fingerprint is not None
    stores = [DocumentStore(d) for d in directories]
    infos = [_store_info(d, len(s)) for d, s in zip(directories, stores, strict=True)]
    if kind == "bm25":
        _bm25_shards(stores, directories, infos, config, advance)
    else:
        _dense_shards(stores, directories, infos, config, advance, out)
    params = {"kind": kind, "shards": [d.name for d in directories], "bounds": bounds}
    encoder = config.dense.encoder if kind == "dense" else None
    write_manifest(out, "sharded", CorpusInfo.of(reader.fingerprint, corpus_path), params, encoder)


def _bm25_shards(
    stores: list[DocumentStore],
    directories: list[Path],
    infos: list[CorpusInfo],
    config: RetrievalConfig,
    advance: Callable[[int], None],
) -> None:
    tokenizer = Tokenizer(config.bm25)
    builders = []
    for store, directory in zip(stores, directories, strict=True):
        builder = StreamedBM25Builder(config.bm25, tokenizer, directory / BM25S_DIR / ".work")
        for start in range(0, len(store), config.bm25.chunk_size):
            chunk = store[start : start + config.bm25.chunk_size]
            builder.add([d.contents for d in chunk])
            advance(len(chunk))
        builders.append(builder)
    frequency: dict[str, int] = {}
    for builder in builders:
        counts = builder.df.tolist()
        for term, term_id in builder.vocab.items():
            frequency[term] = frequency.get(term, 0) + counts[term_id]
    collection = Collection(
        passages=sum(b.passages for b in builders),
        total_length=sum(int(sum(x.sum() for x in b.lengths)) for b in builders),
        document_frequency=frequency,
    )
    for builder, store, directory, info in zip(builders, stores, directories, infos, strict=True):
        builder.finish(directory / BM25S_DIR, collection)
        BM25Retriever.from_files(directory, store, config.bm25, info).save(directory)


def _dense_shards(
    stores: list[DocumentStore],
    directories: list[Path],
    infos: list[CorpusInfo],
    config: RetrievalConfig,
    advance: Callable[[int], None],
    out: Path,
) -> None:
    encoder = load_encoder(config.dense)
    trained = None
    if config.dense.index_type == "ivfpq":
        whole = EncodedPassages(encoder, config.dense, ConcatenatedDocs(stores), advance)
        trained = IVFPQBuilder(config.dense, whole, out / ".training").train()
    first_rows = accumulate([len(s) for s in stores[:-1]], initial=0)
    for store, directory, info, first in zip(stores, directories, infos, first_rows, strict=True):
        retriever = DenseRetriever.build(
            store,
            config.dense,
            info,
            advance,
            encoder,
            directory=directory,
            trained=trained,
            first_row=first,
        )
        retriever.save(directory)
    if trained is not None:  # the trained index and the encoded sample it kept
        shutil.rmtree(trained.parent)
