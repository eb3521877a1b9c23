"""BM25 at scale on real on-disk indexes: the streamed build writes bm25s's scores bit for
bit, MaxScore pruning returns exactly what the full product returns, and the shards of a
`--shards` build answer exactly like one index."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest

from searchrl.config.data import WorldConfig
from searchrl.config.retrieval import BM25Config, RetrievalConfig
from searchrl.data.world import generate_world
from searchrl.retrieval import RetrievalError, build_index, load_index
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.bm25_topk import PostingLists, exhaustive_top_k, pruned_top_k
from searchrl.retrieval.manifest import read_manifest
from searchrl.retrieval.shards import ShardedRetriever
from searchrl.types import Document, Hit


@pytest.fixture(scope="module")
def world() -> tuple[list[Document], list[str]]:
    """~700 synthetic passages (template words in most passages, invented names in a few:
    the skew that makes pruning pay) and questions about them."""
    made = generate_world(WorldConfig(num_entities=300, seed=3, test_questions=60))
    questions = [q.question for split in ("train", "test") for q in made.questions[split]]
    return made.documents, questions


@pytest.fixture(scope="module")
def corpus(
    world: tuple[list[Document], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    path = tmp_path_factory.mktemp("world") / "corpus.jsonl"
    rows = [json.dumps({"id": d.id, "contents": d.contents}) for d in world[0]]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def streamed(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    config = RetrievalConfig(bm25=BM25Config(chunk_size=97))  # many chunks, a partial last
    out = build_index("bm25", corpus, tmp_path_factory.mktemp("bm25") / "index", config)
    retriever = load_index(out)
    assert isinstance(retriever, BM25Retriever)
    return retriever


def queries_of(world: tuple[list[Document], list[str]]) -> list[str]:
    """The world's questions plus random bags of corpus words (common and rare mixed)."""
    rng = random.Random(0)
    words = [w for d in world[0][:200] for w in d.contents.split()]
    bags = [" ".join(rng.sample(words, rng.randint(1, 6))) for _ in range(200)]
    return world[1] + bags


def as_tuples(results: list[list[Hit]]) -> list[list[tuple[str, float]]]:
    return [[(h.document.id, h.score) for h in hits] for hits in results]


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_streamed_build_writes_bm25s_scores_bit_for_bit(
    world: tuple[list[Document], list[str]], tmp_path: Path, method: str
) -> None:
    config = BM25Config(method=method, chunk_size=64)  # type: ignore[arg-type]
    docs = world[0]
    reference = BM25Retriever.build(docs, config)  # bm25s.BM25.index in memory
    ours = BM25Retriever.build_on_disk(docs, tmp_path, config)
    theirs_vocab, our_vocab = reference.model.vocab_dict, ours.model.vocab_dict
    assert {t for t in theirs_vocab if t} == set(our_vocab)
    for term, row in our_vocab.items():
        a, b = reference._matrix.getrow(theirs_vocab[term]), ours._matrix.getrow(row)
        assert np.array_equal(a.indices, b.indices), term
        assert np.array_equal(a.data, b.data), term  # exact, not approximate
    assert (tmp_path / "bm25s" / "data.csc.index.npy").exists()


def test_pruned_search_equals_full_product(
    streamed: BM25Retriever, world: tuple[list[Document], list[str]]
) -> None:
    queries = queries_of(world)
    full = BM25Retriever.from_files(
        streamed.docs.directory, streamed.docs, BM25Config(prune_above=10**12), streamed.corpus
    )
    pruned = BM25Retriever.from_files(
        streamed.docs.directory, streamed.docs, BM25Config(prune_above=0), streamed.corpus
    )
    for k in (1, 3, 10):
        assert as_tuples(pruned.search(queries, k)) == as_tuples(full.search(queries, k))
    # and pruning did happen: most world questions are answered without the full product
    answered = 0
    for terms, weights in pruned._query_terms(world[1]):
        answered += len(terms) > 0 and pruned_top_k(pruned._lists, terms, weights, 3) is not None
    assert answered > len(world[1]) // 2


def test_corpora_above_a_million_passages_skip_the_product_with_the_same_scores(
    streamed: BM25Retriever,
    world: tuple[list[Document], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above `PRODUCT_MAX_PASSAGES` unpruned queries are summed one by one, not by scipy's
    product (0.1 s per batch at 21M passages however small the query): same rows, same
    float32 scores, same tie order."""
    from searchrl.retrieval import bm25 as bm25_module

    queries = queries_of(world)
    directory, docs = streamed.docs.directory, streamed.docs
    unpruned = BM25Config(prune_above=10**12)
    product = BM25Retriever.from_files(directory, docs, unpruned, streamed.corpus)
    expected = {k: as_tuples(product.search(queries, k)) for k in (1, 3, 10)}
    monkeypatch.setattr(bm25_module, "PRODUCT_MAX_PASSAGES", 0)
    summed = BM25Retriever.from_files(directory, docs, unpruned, streamed.corpus)
    monkeypatch.setattr(bm25_module, "sparse", None)  # the product is not reached
    for k in (1, 3, 10):
        assert as_tuples(summed.search(queries, k)) == expected[k]


def test_pruned_top_k_reads_only_essential_postings(streamed: BM25Retriever) -> None:
    # a rare name plus a word in many passages: candidates come from the rare term only
    vocab = streamed.model.vocab_dict
    lists = streamed._lists
    by_df = sorted(vocab.values(), key=lambda t: int(lists.frequency(np.array([t]))[0]))
    rare, common = by_df[0], by_df[-1]
    terms = np.array(sorted([rare, common]))
    rows, _ = pruned_top_k(lists, terms, np.ones(2, np.float32), 1) or ((), ())
    assert len(rows) == 1 and rows[0] in set(lists.postings(rare).tolist())


def test_sharded_build_answers_like_one_index(
    corpus: Path, streamed: BM25Retriever, world: tuple[list[Document], list[str]], tmp_path: Path
) -> None:
    config = RetrievalConfig(bm25=BM25Config(chunk_size=97))
    out = build_index("bm25", corpus, tmp_path / "sharded", config, shards=3)
    manifest = read_manifest(out)
    assert manifest.kind == "sharded" and manifest.params["shards"] == [
        "shard-000", "shard-001", "shard-002"
    ]  # fmt: skip
    assert manifest.corpus.sha256 == streamed.corpus.sha256
    sharded = load_index(out)
    assert isinstance(sharded, ShardedRetriever)
    assert sum(len(s.docs) for s in sharded.shards) == len(streamed.docs)  # type: ignore[attr-defined]
    queries = queries_of(world)
    for whole, merged in zip(streamed.search(queries, 5), sharded.search(queries, 5), strict=True):
        assert [h.document.id for h in merged] == [h.document.id for h in whole]
        assert [h.score for h in merged] == pytest.approx([h.score for h in whole], rel=1e-6)
    # each shard is an ordinary index, servable alone
    assert read_manifest(out / "shard-001").kind == "bm25"


def test_sharding_refuses_more_shards_than_passages(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises((RetrievalError, ValueError), match="at most one shard per passage"):
        build_index("bm25", corpus, tmp_path / "x", shards=10**6)


def zipf_lists(seed: int) -> PostingLists:
    """A random term × passage score matrix with a Zipf-like document frequency (a few terms
    in half the passages, most in a handful), scores growing with rarity and on a coarse grid
    per term, so that ties happen."""
    rng = np.random.default_rng(seed)
    passages, terms = 3000, 60
    rows, data, indptr = [], [], [0]
    for term in range(terms):
        df = max(1, int(passages * 0.5 / (1 + term) ** 1.3))
        listed = np.sort(rng.choice(passages, size=df, replace=False))
        rows.append(listed)
        idf = np.log(1 + passages / df)  # rare terms score high, as in BM25
        data.append((rng.integers(1, 40, size=df) / 8 * idf).astype(np.float32))
        indptr.append(indptr[-1] + df)
    values = np.concatenate(data)
    maxima = np.array([d.max() for d in data], dtype=np.float32)
    return PostingLists(values, np.concatenate(rows), np.array(indptr), maxima)


@pytest.mark.parametrize("seed", range(4))
def test_pruned_top_k_equals_exhaustive_on_skewed_lists(seed: int) -> None:
    # common terms with rare ones (the bounded candidates and the raised threshold act),
    # repeated query words, k from 1 to 20: exactly the exhaustive top k, ties by row
    lists = zipf_lists(seed)
    rng = np.random.default_rng(100 + seed)
    pruned = 0
    for _ in range(150):
        terms = np.unique(rng.choice(60, size=rng.integers(2, 9), replace=False))
        weights = rng.integers(1, 3, size=len(terms)).astype(np.float32)
        k = int(rng.choice([1, 3, 10, 20]))
        found = pruned_top_k(lists, terms, weights, k)
        if found is None:
            continue
        pruned += 1
        want = exhaustive_top_k(lists, terms, weights, k)
        assert found[0].tolist() == want[0].tolist()
        assert found[1].tolist() == want[1].tolist()
    assert pruned > 50


def test_helper_processes_answer_like_one_process(
    streamed: BM25Retriever, world: tuple[list[Document], list[str]]
) -> None:
    """`bm25.processes=3`: two spawned helpers open the same index and answer slices of a
    batch; the hits are those of one process, in request order, for pruned and full queries."""
    directory = streamed.docs.directory
    queries = queries_of(world)
    pooled = BM25Retriever.load(directory, BM25Config(processes=3, prune_above=50))
    try:
        assert pooled._pool is not None and pooled._pool.helpers == 2
        alone = BM25Retriever.load(directory, BM25Config(prune_above=50))
        assert alone._pool is None
        for k in (1, 3):
            assert as_tuples(pooled.search(queries, k)) == as_tuples(alone.search(queries, k))
        # chunks go to whoever is free: a slow local process leaves most to the helpers
        local_chunks: list[int] = []

        def slow_local(chunk: list[str], k: int) -> list:
            local_chunks.append(len(chunk))
            time.sleep(0.05)
            return alone.rank(chunk, k)

        ranked = pooled._pool.rank(queries[:9], 3, slow_local)
        assert sum(local_chunks) < 9  # 9 chunks of one query; helpers answered some
        for (rows, scores), hits in zip(ranked, alone.search(queries[:9], 3), strict=True):
            assert [str(r) for r in rows.tolist()] == [h.document.id for h in hits]
            assert scores.tolist() == [h.score for h in hits]
        assert pooled.search(queries[:2], 3) == alone.search(queries[:2], 3)  # too few: local
    finally:
        pooled._pool.close()
