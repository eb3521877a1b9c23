"""BM25 over the corpus: the eager score matrix (token × passage) in bm25s's format, opened
memory-mapped; a query is answered by MaxScore pruning (`bm25_topk`) when that reads less
than half of its postings, else by one sparse matrix product per batch of such queries (above
a million passages, by adding up each such query's postings on its own: the same scores).

Why not `bm25s.BM25.retrieve`: its numpy backend scores one query at a time with `np.add.at`
over a dense array of all passages (~250 queries/s at 140k passages on this CPU). Multiplying a
sparse query-term matrix by the same precomputed scores gives identical scores, touches only
passages that share a term with the query, and runs at several thousand queries/s at 140k
passages; at millions of passages the common terms' postings dominate, and pruning skips them.

Index files are written by `bm25_build` in a stream (a 21M-passage corpus never sits in RAM);
an in-memory `BM25Retriever.build` uses `bm25s.BM25.index` and gives the same scores.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import Stemmer
from scipy import sparse

from searchrl.config import from_dict
from searchrl.config.retrieval import BM25Config
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.bm25_build import (
    MAX_SCORES_FILE,
    Collection,
    Rescorer,
    bm25s_module,
    build_streamed,
)
from searchrl.retrieval.bm25_pool import Ranked, SearchPool
from searchrl.retrieval.bm25_topk import (
    PostingLists,
    accumulated_top_k,
    exhaustive_top_k,
    max_scores_of,
    pruned_top_k,
    top_k,
)
from searchrl.retrieval.corpus import fingerprint_documents
from searchrl.retrieval.manifest import CorpusInfo, read_manifest, write_manifest
from searchrl.retrieval.store import DocumentStore, write_store
from searchrl.types import Document, Hit

if TYPE_CHECKING:
    from bm25s import BM25 as BM25Model

BM25S_DIR = "bm25s"
PRODUCT_MAX_PASSAGES = 1_000_000
"""Queries that are not pruned share one sparse product per batch up to this many passages
(at 35k passages it answers 4,700-7,300 queries/s); above, each is scored on its own
(`accumulated_top_k`, the same scores): scipy's product fills an array over all passages
on every call, 0.105 s per batch at 21M even for a one-posting query."""
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_STEM_CACHE_LIMIT = 1_000_000


def _english_stopwords() -> Sequence[str]:
    """bm25s's English stop-word list (imported on first use: see `bm25s_module`)."""
    from bm25s.stopwords import STOPWORDS_EN

    return STOPWORDS_EN


class Tokenizer:
    """Lower-case word tokens (scikit-learn's pattern, as bm25s uses), stop words dropped,
    Snowball-stemmed. Corpus and queries must go through the same instance settings."""

    def __init__(self, config: BM25Config) -> None:
        english = config.stopwords == "en"
        self._stopwords = frozenset(_english_stopwords()) if english else frozenset()
        self._stemmer = None if config.stemmer == "none" else Stemmer.Stemmer(config.stemmer)
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        """Tokenize a batch; stems are cached per distinct word because corpora repeat words."""
        words = [[w for w in _TOKEN.findall(t.lower()) if w not in self._stopwords] for t in texts]
        if self._stemmer is None:
            return words
        with self._lock:
            cache = self._cache
            if len(cache) > _STEM_CACHE_LIMIT:
                cache.clear()
            new = list({w for ws in words for w in ws if w not in cache})
            if new:
                cache.update(zip(new, self._stemmer.stemWords(new), strict=True))
            return [[cache[w] for w in ws] for ws in words]


def _query_time(config: BM25Config) -> dict[str, object]:
    return {
        "prune_above": config.prune_above,
        "collection": config.collection,
        "processes": config.processes,
    }


class BM25Retriever:
    """BM25 retriever; only passages sharing at least one query term are returned, so a query
    of stop words alone (or a blank query) gets an empty list."""

    def __init__(
        self,
        model: BM25Model,
        docs: Sequence[Document],
        config: BM25Config,
        corpus: CorpusInfo,
        max_scores: np.ndarray | None = None,
    ) -> None:
        self.model = model
        self.docs = docs
        self.config = config
        self.corpus = corpus
        self._tokenizer = Tokenizer(config)
        scores = model.scores
        indptr = np.asarray(scores["indptr"])
        self._n_terms = len(indptr) - 1
        self._matrix = sparse.csr_matrix(
            (scores["data"], scores["indices"], indptr),
            shape=(self._n_terms, int(scores["num_docs"])),
        )
        if self._matrix.shape[1] != len(docs):
            raise RetrievalError(
                f"BM25 index has {self._matrix.shape[1]} passages but the store has {len(docs)}"
            )
        if max_scores is None:
            max_scores = max_scores_of(np.asarray(scores["data"]), indptr)
        self._lists = PostingLists(scores["data"], scores["indices"], indptr, max_scores)
        self._pool: SearchPool | None = None
        """Helper processes for large batches (`config.processes` > 1, set by `load`)."""

    @classmethod
    def build(
        cls,
        docs: Sequence[Document],
        config: BM25Config | None = None,
        corpus: CorpusInfo | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> BM25Retriever:
        """Index `docs` in memory (row i = docs[i]); `progress` is told how many passages each
        tokenized chunk held. `corpus` defaults to a fingerprint of the documents."""
        config = config or BM25Config()
        if len(docs) == 0:
            raise RetrievalError("cannot build a BM25 index over zero documents")
        tokenizer = Tokenizer(config)
        vocab: dict[str, int] = {}
        token_ids: list[list[int]] = []
        for start in range(0, len(docs), config.chunk_size):
            chunk = docs[start : start + config.chunk_size]
            for tokens in tokenizer([d.contents for d in chunk]):
                token_ids.append([vocab.setdefault(t, len(vocab)) for t in tokens])
            if progress is not None:
                progress(len(chunk))
        model = bm25s_module().BM25(k1=config.k1, b=config.b, method=config.method)
        model.index((token_ids, vocab), show_progress=False)
        corpus = corpus or CorpusInfo.of(fingerprint_documents(docs))
        return cls(model, docs, config, corpus)

    @classmethod
    def build_on_disk(
        cls,
        docs: Sequence[Document],
        directory: str | Path,
        config: BM25Config | None = None,
        corpus: CorpusInfo | None = None,
        progress: Callable[[int], None] | None = None,
        collection: Collection | None = None,
    ) -> BM25Retriever:
        """Index `docs` in a stream straight into `directory` (see `bm25_build`); memory
        stays at one chunk of passages whatever the corpus size. `collection` replaces the
        corpus statistics (a shard scored as part of a larger corpus)."""
        config = config or BM25Config()
        if len(docs) == 0:
            raise RetrievalError("cannot build a BM25 index over zero documents")
        out = Path(directory)
        texts = (d.contents for d in docs)
        build_streamed(texts, config, Tokenizer(config), out / BM25S_DIR, collection, progress)
        corpus = corpus or CorpusInfo.of(fingerprint_documents(docs))
        return cls.from_files(out, docs, config, corpus)

    @classmethod
    def from_files(
        cls, directory: Path, docs: Sequence[Document], config: BM25Config, corpus: CorpusInfo
    ) -> BM25Retriever:
        """Open the bm25s files in `directory` memory-mapped, over passages `docs`."""
        model = bm25s_module().BM25.load(str(directory / BM25S_DIR), mmap=True, show_progress=False)
        bounds = directory / BM25S_DIR / MAX_SCORES_FILE
        max_scores = np.load(bounds, mmap_mode="r") if bounds.exists() else None
        retriever = cls(model, docs, config, corpus, max_scores)
        if config.collection:
            collection = json.loads(Path(config.collection).read_text(encoding="utf-8"))
            retriever._lists.rescore = Rescorer(config, directory / BM25S_DIR, collection)
        return retriever

    def save(self, directory: str | Path) -> None:
        """Write the bm25s arrays, the passages (unless already there) and the manifest."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if not (out / BM25S_DIR / MAX_SCORES_FILE).exists():  # not built in place on disk
            self.model.save(str(out / BM25S_DIR), show_progress=False)
            np.save(out / BM25S_DIR / MAX_SCORES_FILE, np.asarray(self._lists.max_scores))
        if not (isinstance(self.docs, DocumentStore) and self.docs.directory == out):
            write_store(self.docs, out)
        write_manifest(out, "bm25", self.corpus, asdict(self.config))

    @classmethod
    def load(cls, directory: str | Path, config: BM25Config | None = None) -> BM25Retriever:
        """Open a saved index; the score arrays and passages are memory-mapped, not read.
        `config` may change the query-time settings (`prune_above`, `collection`);
        tokenization and scoring parameters always come from the manifest."""
        directory = Path(directory)
        manifest = read_manifest(directory)
        if manifest.kind != "bm25":
            raise RetrievalError(f"{directory}: a {manifest.kind} index, not bm25")
        config = from_dict(
            BM25Config,
            {**manifest.params, **({} if config is None else _query_time(config))},
        )
        retriever = cls.from_files(directory, DocumentStore(directory), config, manifest.corpus)
        if config.processes > 1:
            helper = replace(config, processes=1)
            retriever._pool = SearchPool(directory, helper, config.processes - 1)
        return retriever

    def _query_terms(self, queries: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: its distinct known term ids (ascending) and how often each occurs."""
        vocab = self.model.vocab_dict
        out = []
        for tokens in self._tokenizer(queries):
            ids = [t for t in (vocab.get(token) for token in tokens) if t is not None]
            terms, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
            keep = terms < self._n_terms
            out.append((terms[keep], counts[keep].astype(np.float32)))
        return out

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-k passages per query, best first; equal scores are ordered by corpus row."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        pool = self._pool
        if pool is not None and len(queries) >= 2 * (pool.helpers + 1):
            ranked = pool.rank(queries, k, self.rank)
        else:
            ranked = self.rank(queries, k)
        return [self._hits(rows, scores) for rows, scores in ranked]

    def rank(self, queries: Sequence[str], k: int) -> list[Ranked]:
        """(rows, scores) of each query's top k, in this process (what `search` and the
        helper processes of `bm25_pool` answer with)."""
        if not queries:
            return []
        empty: Ranked = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        results: list[Ranked] = [empty for _ in queries]
        full: list[int] = []
        parsed = self._query_terms(queries)
        rescored = self._lists.rescore is not None
        for i, (terms, weights) in enumerate(parsed):
            found = None
            if len(terms) and self._lists.frequency(terms).sum() > self.config.prune_above:
                found = pruned_top_k(self._lists, terms, weights, k)
            if found is None and rescored:  # the product would read unrescored scores
                found = exhaustive_top_k(self._lists, terms, weights, k)
            if found is None and self._matrix.shape[1] > PRODUCT_MAX_PASSAGES:
                found = accumulated_top_k(self._lists, terms, weights, k)
            if found is None:
                full.append(i)
            else:
                results[i] = found
        if full:
            rows = np.repeat(np.arange(len(full)), [len(parsed[i][0]) for i in full])
            cols = np.concatenate([parsed[i][0] for i in full])
            values = np.concatenate([parsed[i][1] for i in full])
            query = sparse.csr_matrix((values, (rows, cols)), shape=(len(full), self._n_terms))
            scores = (query @ self._matrix).tocsr()
            for row, i in enumerate(full):
                span = slice(scores.indptr[row], scores.indptr[row + 1])
                results[i] = top_k(scores.indices[span], scores.data[span], k)
        return results

    def _hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        return [Hit(self.docs[int(r)], float(s)) for r, s in zip(rows, scores, strict=True)]
