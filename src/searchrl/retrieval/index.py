"""Building and opening index directories.

An index directory holds `manifest.json`, the passages (`documents.jsonl` + offsets) and the
retriever's own files; a hybrid directory holds two complete sub-indexes, `first/` (BM25) and
`second/` (dense). `load_index` dispatches on the manifest kind, so every consumer (server,
rollout, evaluation) opens any index the same way.

A build writes into a hidden temporary directory next to the target and renames it into place
only when complete, so a failed or killed rebuild leaves a working index untouched; an existing
non-empty target is replaced only with `force`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from searchrl.config import from_dict
from searchrl.config.retrieval import DenseConfig, HybridConfig, RetrievalConfig
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.corpus import CorpusError, CorpusReader, fingerprint_file
from searchrl.retrieval.dense import DenseRetriever
from searchrl.retrieval.hybrid import HybridRetriever
from searchrl.retrieval.manifest import CorpusInfo, read_manifest, write_manifest
from searchrl.retrieval.sharding import build_sharded
from searchrl.retrieval.shards import ShardedRetriever
from searchrl.retrieval.store import DocumentStore, write_store
from searchrl.utils.output import atomic_directory, check_output
from searchrl.utils.progress import LineProgress

Kind = Literal["bm25", "dense", "hybrid"]
KINDS: tuple[Kind, ...] = ("bm25", "dense", "hybrid")
HYBRID_PARTS: tuple[tuple[str, Kind], ...] = (("first", "bm25"), ("second", "dense"))


def _check_expected(directory: Path, corpus: str | Path | None, encoder: str | None) -> None:
    manifest = read_manifest(directory)
    if corpus is not None:
        actual = fingerprint_file(corpus)
        built = manifest.corpus
        if actual.sha256 != built.sha256:
            raise RetrievalError(
                f"{directory} was built from another corpus: {built.path or 'documents in memory'}"
                f" ({built.rows} rows, sha256 {built.sha256[:12]}…), not {corpus} "
                f"({actual.rows} rows, sha256 {actual.sha256[:12]}…). Rebuild it with "
                f"`searchrl index --corpus {corpus}`"
            )
    if encoder is not None and manifest.encoder != encoder:
        have = manifest.encoder or f"no encoder (a {manifest.kind} index)"
        raise RetrievalError(
            f"{directory} was built with encoder {have!r}, not {encoder!r}: query vectors from "
            "another encoder would be meaningless against it"
        )


def shard_directories(directory: str | Path) -> list[Path]:
    """The shard directories of a sharded index (`searchrl index --shards N`), or the
    directory itself for any other index."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest.kind != "sharded":
        return [directory]
    return [directory / name for name in manifest.params["shards"]]


def load_index(
    directory: str | Path,
    corpus: str | Path | None = None,
    encoder: str | None = None,
    config: RetrievalConfig | None = None,
) -> Retriever:
    """Open an index of any kind. With `corpus` (a corpus file) or `encoder` given, refuse an
    index built from something else. `config` supplies query-time dense settings."""
    directory = Path(directory)
    _check_expected(directory, corpus, encoder)
    manifest = read_manifest(directory)
    if manifest.kind == "bm25":
        return BM25Retriever.load(directory, config.bm25 if config else None)
    if manifest.kind == "dense":
        return DenseRetriever.load(directory, config.dense if config else None)
    if manifest.kind == "hybrid":
        first, second = (load_index(directory / name, config=config) for name, _ in HYBRID_PARTS)
        return HybridRetriever(first, second, from_dict(HybridConfig, manifest.params))
    if manifest.kind == "faiss":
        from searchrl.retrieval.external import open_linked

        return open_linked(directory, config.dense if config else DenseConfig())
    if manifest.kind == "sharded":
        shards = [load_index(d, config=config) for d in shard_directories(directory)]
        return ShardedRetriever(shards)
    raise RetrievalError(f"{directory}: unknown index kind {manifest.kind!r}")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[cyan]{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _directory_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@contextlib.contextmanager
def _bar(console: Console, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar with passages/s and ETA; yields `advance(n)`. Without a terminal to
    redraw it in (`nohup`, a log file) it prints a plain line now and then instead: rich draws
    nothing there until the build ends, and a 20-minute encode looked hung."""
    started = time.perf_counter()
    if not console.is_terminal:
        lines = LineProgress(label, total, stream=console.file)

        def advance_line(n: int) -> None:
            rate = (lines.completed + n) / max(time.perf_counter() - started, 1e-9)
            lines.update(advance=n, description=f"{rate:,.0f} passages/s")

        yield advance_line
        return
    with _progress(console) as progress:
        task = progress.add_task(label, total=total, rate="")

        def advance(n: int) -> None:
            done = progress.tasks[task].completed + n
            rate = done / max(time.perf_counter() - started, 1e-9)
            progress.update(task, advance=n, rate=f"{rate:,.0f} passages/s")

        yield advance


def _build_single(
    kind: Kind, corpus_path: Path, out: Path, config: RetrievalConfig, console: Console
) -> None:
    reader = CorpusReader(corpus_path)
    with console.status(f"reading {corpus_path}"):
        rows = write_store(reader, out)
    assert reader.fingerprint is not None
    corpus = CorpusInfo.of(reader.fingerprint, corpus_path)
    docs = DocumentStore(out)
    verb = "tokenizing" if kind == "bm25" else "encoding"
    with _bar(console, f"{kind}: {verb}", rows) as advance:
        retriever: BM25Retriever | DenseRetriever
        if kind == "bm25":
            retriever = BM25Retriever.build_on_disk(docs, out, config.bm25, corpus, advance)
        else:
            retriever = DenseRetriever.build(docs, config.dense, corpus, advance, directory=out)
        retriever.save(out)


def build_index(
    kind: Kind,
    corpus_path: str | Path,
    out_dir: str | Path,
    config: RetrievalConfig | None = None,
    console: Console | None = None,
    *,
    force: bool = False,
    shards: int = 1,
) -> Path:
    """Build a `kind` index of the corpus file into `out_dir`, showing progress and printing
    build time, throughput and size. The target must be absent or empty unless `force`; it
    changes only when the build has finished (see the module docstring). `shards` > 1
    splits the corpus rows into that many indexes that answer together exactly like one
    (`retrieval.sharding`)."""
    if kind not in KINDS:
        raise RetrievalError(f"unknown index kind {kind!r}; expected one of {list(KINDS)}")
    if shards < 1 or (shards > 1 and kind == "hybrid"):
        raise RetrievalError(f"--shards must be at least 1 (and 1 for hybrid), got {shards}")
    config = config or RetrievalConfig()
    console = console or Console(stderr=True)
    corpus_path, out = Path(corpus_path), Path(out_dir)
    if not corpus_path.is_file():
        raise CorpusError(f"corpus file not found: {corpus_path}")
    check_output(out, force=force, kind="directory")
    started = time.perf_counter()
    with atomic_directory(out, force=force) as tmp:
        if shards > 1:
            total = sum(1 for _ in corpus_path.open("rb"))  # each passage encoded once
            with _bar(console, f"{kind}: {shards} shards", total) as advance:
                build_sharded(kind, corpus_path, tmp, config, shards, advance)
        elif kind == "hybrid":
            for name, part in HYBRID_PARTS:
                _build_single(part, corpus_path, tmp / name, config, console)
            first = read_manifest(tmp / HYBRID_PARTS[0][0])
            second = read_manifest(tmp / HYBRID_PARTS[1][0])
            write_manifest(tmp, "hybrid", first.corpus, asdict(config.hybrid), second.encoder)
        else:
            _build_single(kind, corpus_path, tmp, config, console)
        rows = read_manifest(tmp).corpus.rows
        size = _directory_bytes(tmp)
    elapsed = time.perf_counter() - started
    console.print(
        f"built {kind} index of {rows:,} passages in {elapsed:.1f} s "
        f"({rows / elapsed:,.0f} passages/s), {size / 1e6:.1f} MB at {out}"
    )
    return out
