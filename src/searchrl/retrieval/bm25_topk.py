"""Exact BM25 top-k that reads a fraction of the posting lists: MaxScore pruning.

Scoring a query by multiplying it into the term × passage score matrix touches every posting
of every query term. At 140k passages that is ~10k postings a query; at 21M, a common word
alone ("born", "city") has millions, and batched search drops from >1,000 to a few dozen
queries/s. MaxScore (Turtle & Flood, 1995) avoids most of them and stays exact:

1. each term's largest score in any passage (`max_scores`, stored at build time) bounds what
   the term can add;
2. the passages of the rarest query terms are scored exactly; the k-th best of those scores,
   θ, is a score the final top k must reach;
3. the terms whose bounds add up to less than θ ("non-essential") cannot lift a passage that
   has none of the other terms into the top k, so candidates are only the postings of the
   other ("essential") terms — typically the rare, high-idf ones;
4. every candidate is scored exactly: a binary search of its row in each query term's
   passage-sorted posting list (a few memory-mapped pages per term).

Scores are accumulated in float32, term by term in increasing term id, exactly as the sparse
product does, so the pruned result equals the full one bit for bit, ties included (equal
scores are ordered by passage row). When pruning would not save at least half the postings,
the caller falls back to the sparse product.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Rescore(Protocol):
    """Scores under other collection statistics (see `bm25_build.Rescorer`)."""

    def factor(self, term: int) -> float:
        """A term's new maximum score is at most its stored maximum times this."""
        ...

    def values(self, term: int, stored: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """New float32 scores of a term's postings at passage `rows`."""
        ...


BOUND_SLACK = 1e-5
"""Relative margin on summed bounds: a float32 sum of scores may round slightly above the
exact sum of their maxima."""


class PostingLists:
    """The term-major score matrix (CSR: `indptr` per term, passage rows sorted within a
    term) plus each term's maximum score; any of them may be memory-mapped."""

    def __init__(
        self,
        data: np.ndarray,
        indices: np.ndarray,
        indptr: np.ndarray,
        max_scores: np.ndarray,
        rescore: Rescore | None = None,
    ) -> None:
        self.data = data
        self.indices = indices
        self.indptr = indptr
        self.max_scores = max_scores
        self.rescore = rescore
        """Optional: turns stored scores of a term into scores under other collection
        statistics (`Rescore.values`), with a factor bounding the term's new maximum."""

    def bounds(self, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Upper bounds of what each query term can add to a passage's score."""
        bounds = weights.astype(np.float64) * self.max_scores[terms].astype(np.float64)
        if self.rescore is not None:
            bounds *= np.array([self.rescore.factor(int(t)) for t in terms])
        return bounds

    def frequency(self, terms: np.ndarray) -> np.ndarray:
        """Postings (document frequency) of each term."""
        return (self.indptr[terms + 1] - self.indptr[terms]).astype(np.int64)

    def postings(self, term: int) -> np.ndarray:
        """Passage rows of one term (a view into the possibly memory-mapped array)."""
        return self.indices[self.indptr[term] : self.indptr[term + 1]]

    def score(self, terms: np.ndarray, weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Exact float32 scores of sorted passage `rows` for a query (terms ascending)."""
        total = np.zeros(len(rows), dtype=np.float32)
        for term, weight in zip(terms.tolist(), weights.tolist(), strict=True):
            start, end = int(self.indptr[term]), int(self.indptr[term + 1])
            if start == end:
                continue
            listed = self.indices[start:end]
            pos = np.minimum(np.searchsorted(listed, rows), end - start - 1)
            hit = listed[pos] == rows
            values = np.where(hit, self.data[start:end][pos], np.float32(0))
            if self.rescore is not None:
                found = np.flatnonzero(hit)
                values[found] = self.rescore.values(term, values[found], rows[found])
            total += np.float32(weight) * values
        return total


def exhaustive_top_k(
    lists: PostingLists, terms: np.ndarray, weights: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Score every passage holding a query term (no pruning); what a rescored index does
    where the sparse product, which reads stored scores, cannot be used."""
    parts = [np.asarray(lists.postings(int(t))) for t in terms]
    rows = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    return top_k(rows, lists.score(terms, weights, rows), k)


def max_scores_of(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each term's largest score (0 for a term without postings), for indexes built before
    `max_scores.npy` was stored."""
    terms = len(indptr) - 1
    out = np.zeros(terms, dtype=np.float32)
    lengths = np.diff(indptr)
    filled = np.flatnonzero(lengths > 0)
    if len(filled):
        out[filled] = np.maximum.reduceat(data, indptr[filled].astype(np.int64))
    return out


def top_k(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (rows, scores), best first; equal scores by increasing row, also at the
    k-th place (argpartition alone would pick an arbitrary one of tied passages)."""
    if len(scores) > k:
        keep = scores >= np.partition(scores, -k)[-k]
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def pruned_top_k(
    lists: PostingLists, terms: np.ndarray, weights: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, scores) of the exact top k, best first, ties by row; None when pruning would
    read more than half of the query's postings (use the full product then). `terms` are
    sorted and distinct, `weights` their counts in the query."""
    frequency = lists.frequency(terms)
    total = int(frequency.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    # step 2: a threshold from the rarest terms' passages
    seed: list[np.ndarray] = []
    seen = 0
    for i in np.argsort(frequency, kind="stable"):
        if seen >= 8 * k or seen + frequency[i] > total // 2:
            break
        seed.append(np.asarray(lists.postings(int(terms[i]))))
        seen += int(frequency[i])
    if not seed:
        return None
    candidates = np.unique(np.concatenate(seed))
    threshold = -np.inf
    if len(candidates) >= k:
        threshold = float(np.partition(lists.score(terms, weights, candidates), -k)[-k])
    # step 3: essential terms
    bounds = lists.bounds(terms, weights)
    by_bound = np.argsort(bounds, kind="stable")
    reach = np.cumsum(bounds[by_bound]) * (1 + BOUND_SLACK)
    essential = by_bound[int(np.searchsorted(reach, threshold, side="left")) :]
    cost = int(frequency[essential].sum())
    if cost > total // 2:
        return None
    parts = [candidates, *(np.asarray(lists.postings(int(terms[i]))) for i in essential)]
    candidates = np.unique(np.concatenate(parts))
    return top_k(candidates, lists.score(terms, weights, candidates), k)
