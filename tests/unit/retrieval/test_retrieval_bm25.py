"""BM25 on a real on-disk index: ranking, stemming, empty queries, save/load, manifest checks,
and a slice of the shared Wikipedia corpus."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from searchrl.config.retrieval import BM25Config, RetrievalConfig
from searchrl.retrieval import RetrievalError, Retriever, build_index, load_index
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.corpus import CorpusReader
from searchrl.retrieval.manifest import read_manifest
from searchrl.types import Document

QUERIES = {
    "who designed the tower in Paris": "eiffel",
    "highest mountain on earth": "everest",
    "programming language by Guido van Rossum": "python",
    "when was the city bank of new york founded": "citibank",
    "largest coral reef": "reef",
}


def top_ids(retriever: Retriever, queries: list[str], k: int = 3) -> list[list[str]]:
    return [[h.document.id for h in hits] for hits in retriever.search(queries, k)]


@pytest.fixture(scope="module")
def built(small_docs: list[Document]) -> BM25Retriever:
    return BM25Retriever.build(small_docs)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, corpus_file: Path) -> Path:
    return build_index("bm25", corpus_file, tmp_path_factory.mktemp("bm25"))


def test_relevant_passage_ranks_first(built: BM25Retriever) -> None:
    results = top_ids(built, list(QUERIES))
    assert [r[0] for r in results] == list(QUERIES.values())


def test_scores_descend_and_k_caps(built: BM25Retriever) -> None:
    (hits,) = built.search(["the tower designed in Paris by Eiffel"], 2)
    assert len(hits) == 2
    assert hits[0].score >= hits[1].score > 0


def test_stemming_matches_other_word_forms(built: BM25Retriever) -> None:
    assert top_ids(built, ["composing baroque concerto"], 1) == [["bach"]]
    assert top_ids(built, ["founding of banks"], 1) == [["citibank"]]


def test_blank_and_stopword_queries_get_no_passages(built: BM25Retriever) -> None:
    assert built.search(["", "   ", "the of and", "Eiffel"], 3)[:3] == [[], [], []]
    assert built.search([], 3) == []


def test_k_larger_than_corpus_and_invalid_k(built: BM25Retriever) -> None:
    assert len(built.search(["tower mountain reef bank tea python"], 100)[0]) == 6
    with pytest.raises(ValueError, match="k must be at least 1"):
        built.search(["tower"], 0)


def test_default_config_and_unicode(built: BM25Retriever) -> None:
    assert built.config == BM25Config()
    assert top_ids(built, ["東京 café"], 1) == [["tea"]]


def test_save_load_round_trip(built: BM25Retriever, tmp_path: Path) -> None:
    built.save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    queries = [*QUERIES, "Nepal China border"]
    assert loaded.search(queries, 3) == built.search(queries, 3)
    manifest = read_manifest(tmp_path)
    assert manifest.kind == "bm25" and manifest.corpus.rows == 8 and manifest.corpus.path is None
    assert manifest.params["stemmer"] == "english"


def test_build_index_writes_manifest_and_loads(index_dir: Path, corpus_file: Path) -> None:
    manifest = read_manifest(index_dir)
    reader = CorpusReader(corpus_file)
    assert len(list(reader)) == manifest.corpus.rows
    assert reader.fingerprint is not None
    assert manifest.corpus.sha256 == reader.fingerprint.sha256
    assert manifest.corpus.path == str(corpus_file)
    assert manifest.searchrl_version and manifest.created.endswith("Z")
    retriever = load_index(index_dir, corpus=corpus_file)
    assert isinstance(retriever, BM25Retriever)
    assert [r[0] for r in top_ids(retriever, list(QUERIES))] == list(QUERIES.values())


def test_load_refuses_other_corpus_and_encoder(index_dir: Path, other_corpus_file: Path) -> None:
    with pytest.raises(RetrievalError, match="was built from another corpus"):
        load_index(index_dir, corpus=other_corpus_file)
    with pytest.raises(RetrievalError, match="no encoder"):
        load_index(index_dir, encoder="intfloat/e5-base-v2")


def test_load_errors_are_clear(tmp_path: Path, index_dir: Path) -> None:
    with pytest.raises(RetrievalError, match="not an index directory"):
        load_index(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RetrievalError, match="unreadable manifest"):
        load_index(tmp_path)
    with pytest.raises(RetrievalError, match="unknown index kind"):
        build_index("splade", index_dir, tmp_path)  # type: ignore[arg-type]


def test_config_changes_tokenization(small_docs: list[Document]) -> None:
    plain = BM25Retriever.build(small_docs, BM25Config(stemmer="none", stopwords="none"))
    assert plain.search(["composing"], 3) == [[]]
    assert top_ids(plain, ["the"], 1)[0]  # stop words are now indexed


def test_finds_wikipedia_passage_by_title(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "corpus" / "wiki_paragraphs.jsonl"
    with source.open() as handle:
        lines = list(islice(handle, 2000))
    sliced = tmp_path / "slice.jsonl"
    sliced.write_text("".join(lines))
    retriever = load_index(build_index("bm25", sliced, tmp_path / "idx", RetrievalConfig()))
    titles = [json.loads(line)["contents"].split("\n", 1)[0].strip('"') for line in lines[::250]]
    results = retriever.search(titles, 10)
    for title, hits in zip(titles, results, strict=True):
        assert any(h.document.title.strip('"') == title for h in hits[:3]), title


def test_a_build_without_a_terminal_prints_progress_lines(
    tmp_path: Path, corpus_file: Path
) -> None:
    """`nohup searchrl index … > log` wrote nothing for the 20k-passage encode: rich draws no
    bar where it cannot redraw one."""
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    build_index("bm25", corpus_file, tmp_path / "idx", console=Console(file=out, width=200))
    lines = [x for x in out.getvalue().splitlines() if x.startswith("bm25: tokenizing")]
    assert lines and "passages/s" in lines[-1]
    done, total = lines[-1].split(": ", 1)[1].split(" ")[1].split("/")
    assert done == total
