"""Hybrid retrieval by reciprocal-rank fusion (RRF): each retriever's top `depth` passages
score 1 / (rrf_k + rank); passages are ranked by the sum. Fusing ranks rather than scores
means BM25 and cosine scales never need calibrating against each other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from searchrl.config.retrieval import HybridConfig
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.retrieval.manifest import read_manifest, write_manifest
from searchrl.types import Hit


def rrf_fuse(rankings: Sequence[Sequence[Hit]], k: int, rrf_k: int) -> list[Hit]:
    """Fuse ranked lists of one query; documents are matched by id, ties broken by the order
    in which a document first appeared (earlier retriever, better rank)."""
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            doc_id = hit.document.id
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(doc_id, hit)
    order = sorted(first, key=lambda d: -scores[d])
    return [Hit(first[d].document, scores[d]) for d in order[:k]]


class HybridRetriever:
    """Two retrievers fused by RRF; scores are the fused RRF values."""

    def __init__(
        self,
        first: Retriever,
        second: Retriever,
        config: HybridConfig | None = None,
    ) -> None:
        self.first = first
        self.second = second
        self.config = config or HybridConfig()

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Ask both retrievers for max(k, depth) candidates, then fuse per query."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        depth = max(k, self.config.depth)
        first = self.first.search(queries, depth)
        second = self.second.search(queries, depth)
        return [rrf_fuse((a, b), k, self.config.rrf_k) for a, b in zip(first, second, strict=True)]

    def save(self, directory: str | Path) -> None:
        """Save both parts as complete indexes in `first/` and `second/`, then a hybrid
        manifest; both parts must be saveable and built from the same corpus."""
        out = Path(directory)
        manifests = []
        for name, part in (("first", self.first), ("second", self.second)):
            save = getattr(part, "save", None)
            if save is None:
                raise RetrievalError(f"the {name} retriever of this hybrid cannot be saved")
            save(out / name)
            manifests.append(read_manifest(out / name))
        if manifests[0].corpus.sha256 != manifests[1].corpus.sha256:
            raise RetrievalError(
                "the two parts of a hybrid index were built from different corpora"
            )
        encoder = next((m.encoder for m in manifests if m.encoder), None)
        write_manifest(out, "hybrid", manifests[0].corpus, asdict(self.config), encoder=encoder)
