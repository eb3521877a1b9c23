"""Exact BM25 top-k that reads a fraction of the posting lists: MaxScore pruning.

Scoring a query by multiplying it into the term × passage score matrix touches every posting
of every query term. At 140k passages that is ~10k postings a query; at 21M, a common word
alone ("born", "city") has millions, and batched search drops from >1,000 to a few dozen
queries/s. MaxScore (Turtle & Flood, 1995) avoids most of them and stays exact:

1. each term's largest score in any passage (`max_scores`, stored at build time) bounds what
   the term can add;
2. the passages of the rarest query terms with the best partial scores (what those terms
   add) are scored exactly; the k-th best of those scores, θ, is a score the final top k
   must reach;
3. the terms whose bounds add up to less than θ ("non-essential") cannot lift a passage that
   has none of the other terms into the top k, so candidates are only the postings of the
   other ("essential") terms — typically the rare, high-idf ones;
4. a candidate's partial score from the essential postings just read, plus the other terms'
   bounds, must reach θ; the other terms are then added one at a time (a binary search of the
   candidate's row in the term's passage-sorted list) and candidates dropped as they fall
   short; partial scores are lower bounds too, so their k-th best raises θ on the way;
5. the few survivors are scored exactly.

At 1M template-heavy passages (`benchmarks/retrieval/scale.py`'s synthetic worlds, where "city" is
in 39% of passages) steps 2 and 4 took world questions from 5 to 628 queries/s on one busy core
(median 0.8 ms), the slowest from 3.8 s to 28 ms.

Scores are accumulated in float32, term by term in increasing term id, exactly as the sparse
product does, so the pruned result equals the full one bit for bit, ties included (equal
scores are ordered by passage row). When pruning would not save at least half the postings,
the caller falls back to the sparse product.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        # Plain ndarray views of the same (possibly mapped) buffers: numpy's memmap subclass
        # costs a Python-level __getitem__/__array_finalize__ on every slice, ~15% of a query.
        self.data = np.asarray(data)
        self.indices = np.asarray(indices)
        self.indptr = np.asarray(indptr)
        self.max_scores = np.asarray(max_scores)
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


def accumulated_top_k(
    lists: PostingLists, terms: np.ndarray, weights: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Score every passage holding a query term (no pruning) by adding each term's weighted
    postings in float32, term by term in increasing term id: what the sparse product
    `query @ scores` computes, bit for bit. Not the product itself: scipy's sparse product
    allocates and fills an array over all passages on every call, ~0.1 s at 21M passages
    for a query with a single posting."""
    parts = [np.asarray(lists.postings(int(t))) for t in terms]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    rows, at = _union(parts)
    total = np.zeros(len(rows), dtype=np.float32)
    offset = 0
    for term, weight, part in zip(terms.tolist(), weights.tolist(), parts, strict=True):
        start, n = int(lists.indptr[term]), len(part)
        # one posting per passage and term: fancy-index addition never repeats a row
        total[at[offset : offset + n]] += np.float32(weight) * lists.data[start : start + n]
        offset += n
    return top_k(rows, total, k)


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
    seed: list[int] = []
    seen = 0
    for i in np.argsort(frequency, kind="stable"):
        if seen >= 8 * k or seen + frequency[i] > total // 2:
            break
        seed.append(int(i))
        seen += int(frequency[i])
    if not seed:
        return None
    candidates = _best_by_partial_score(lists, terms, weights, seed, 8 * k)
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
    others = by_bound[: len(by_bound) - len(essential)][::-1]  # largest bound first
    found = _bounded_candidates(lists, terms, weights, essential, others, bounds, threshold, k)
    candidates = _union([candidates, found])[0]
    return top_k(candidates, lists.score(terms, weights, candidates), k)


def _best_by_partial_score(
    lists: PostingLists, terms: np.ndarray, weights: np.ndarray, seed: list[int], size: int
) -> np.ndarray:
    """The `size` passages of the `seed` terms with the largest partial scores (what those
    terms alone add), sorted: the ones worth scoring exactly for a threshold. The seed's
    largest list can hold ~20k passages at 1M; scoring all of them cost more than the rest
    of the query. Where scores can be negative or are rescored, all of them."""
    passages, partial, nonnegative = _partial_scores(lists, terms, weights, seed)
    if len(passages) <= size or partial is None or not nonnegative:
        return passages
    return np.sort(passages[np.argpartition(partial, -size)[-size:]])


def _partial_scores(
    lists: PostingLists, terms: np.ndarray, weights: np.ndarray, chosen: Sequence[int]
) -> tuple[np.ndarray, np.ndarray | None, bool]:
    """The passages of the `chosen` query terms (sorted), what those terms add to each (None
    when the stored scores are to be rescored: they bound nothing), and whether every added
    score was non-negative (then partial scores are lower bounds of the final ones)."""
    passages, at = _union([np.asarray(lists.postings(int(terms[i]))) for i in chosen])
    if lists.rescore is not None:
        return passages, None, False
    values = np.concatenate([float(weights[i]) * _scores_of(lists, int(terms[i])) for i in chosen])
    partial = np.bincount(at, weights=values, minlength=len(passages))
    return passages, partial, bool(values.min(initial=0.0) >= 0)


def _union(lists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct rows of sorted posting lists, and where each posting landed
    (`np.unique(..., return_inverse=True)`, 5-10× faster here: a stable sort of
    concatenated sorted runs only merges them, where numpy's unique hashes every row)."""
    rows = np.concatenate(lists)
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    new = np.empty(len(ordered), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    at = np.empty(len(rows), dtype=np.int64)
    at[order] = np.cumsum(new) - 1
    return ordered[new], at


def _bounded_candidates(
    lists: PostingLists,
    terms: np.ndarray,
    weights: np.ndarray,
    essential: np.ndarray,
    others: np.ndarray,
    bounds: np.ndarray,
    threshold: float,
    k: int,
) -> np.ndarray:
    """The passages of the `essential` terms whose score can still reach `threshold`.

    Each passage's partial score (what the essential terms add, from the postings just read)
    plus the `others`' bounds must reach it; then the other terms are added one at a time,
    largest bound first (a binary search per candidate), and passages that can no longer
    reach the threshold are dropped after each. Partial scores are also lower bounds of the
    final ones (BM25 terms add, never subtract), so their k-th best raises the threshold. At 1M
    template-heavy passages a question's common words gave ~80-500k candidates; a few
    hundred survive, and only those are scored exactly (in float32, like the product)."""
    passages, partial, nonnegative = _partial_scores(lists, terms, weights, essential.tolist())
    if partial is None or not np.isfinite(threshold):
        return passages
    rest = float(bounds[others].sum())
    for i in [None, *others.tolist()]:
        if i is not None:  # add term i exactly, take its bound off the rest
            listed = np.asarray(lists.postings(int(terms[i])))
            if len(listed):
                pos = np.minimum(np.searchsorted(listed, passages), len(listed) - 1)
                hit = listed[pos] == passages
                stored = lists.data[int(lists.indptr[terms[i]]) + pos[hit]]  # a gather
                added = float(weights[i]) * np.asarray(stored, dtype=np.float64)
                nonnegative &= bool(added.min(initial=0.0) >= 0)
                partial[hit] += added
            rest -= float(bounds[i])
        if nonnegative and len(partial) > k:
            best = float(np.partition(partial, -k)[-k])
            threshold = max(threshold, best * (1 - BOUND_SLACK))
        keep = (partial + max(rest, 0.0)) * (1 + BOUND_SLACK) >= threshold
        passages, partial = passages[keep], partial[keep]
    return passages


def _scores_of(lists: PostingLists, term: int) -> np.ndarray:
    """A term's stored scores (float64), aligned with `lists.postings(term)`."""
    return np.asarray(lists.data[lists.indptr[term] : lists.indptr[term + 1]], dtype=np.float64)
