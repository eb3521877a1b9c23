"""Serving a faiss index built outside searchrl (the way Search-R1's index builder writes one)
with its JSONL corpus, without rebuilding; and manifests that name their corpus absolutely."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from test_server import DOCS, serving, wait_healthy

from searchrl.config.retrieval import DenseConfig
from searchrl.retrieval import RetrievalError, build_index
from searchrl.retrieval.corpus import CorpusError
from searchrl.retrieval.dense import DenseRetriever, encode_texts, load_encoder
from searchrl.retrieval.external import JsonlCorpus, line_spans, open_faiss_index
from searchrl.retrieval.manifest import read_manifest
from searchrl.retrieval.server import create_app
from searchrl.types import Document

torch = pytest.importorskip("torch")
faiss = pytest.importorskip("faiss")


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def small_docs() -> list[Document]:
    return DOCS


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": d.id, "contents": d.contents}) + "\n" for d in DOCS))
    return path


@pytest.fixture(scope="module")
def encoder() -> Any:
    return load_encoder(DenseConfig())


@pytest.fixture(scope="module")
def search_r1_index(
    tmp_path_factory: pytest.TempPathFactory, small_docs: list[Document], encoder: Any
) -> tuple[Path, Path]:
    """`e5_Flat.index` + `wiki-18.jsonl` as Search-R1 builds them: row i is faiss id i,
    normalized vectors in an inner-product flat index."""
    out = tmp_path_factory.mktemp("search_r1")
    corpus = out / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": d.contents}) + "\n"
                              for i, d in enumerate(small_docs)))  # fmt: skip
    vectors = encode_texts(encoder, DenseConfig(), [d.contents for d in small_docs], True)
    index = faiss.index_factory(vectors.shape[1], "Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    faiss.write_index(index, str(out / "e5_Flat.index"))
    return out / "e5_Flat.index", corpus


def test_serves_the_external_index_like_our_own(
    search_r1_index: tuple[Path, Path], small_docs: list[Document], encoder: Any
) -> None:
    faiss_file, corpus = search_r1_index
    ours = DenseRetriever.build(small_docs, DenseConfig(), encoder=encoder)
    queries = ["tallest peak in the world", "a hot drink brewed from leaves"]
    expected = [[h.document.contents for h in hits] for hits in ours.search(queries, 3)]
    app = create_app(lambda: open_faiss_index(faiss_file, corpus, DenseConfig()))
    with serving(app) as url, httpx.Client(timeout=30) as client:
        wait_healthy(client, url)
        body = {"queries": queries, "topk": 3, "return_scores": True}
        result = client.post(f"{url}/retrieve", json=body).json()["result"]
    assert [[item["document"]["contents"] for item in hits] for hits in result] == expected
    assert result[0][0]["document"]["id"] in {str(i) for i in range(len(small_docs))}


def test_refuses_a_corpus_or_encoder_that_does_not_match(
    search_r1_index: tuple[Path, Path], tmp_path: Path
) -> None:
    faiss_file, corpus = search_r1_index
    shorter = tmp_path / "short.jsonl"
    shorter.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(RetrievalError, match=r"vectors but .* has 4 rows"):
        open_faiss_index(faiss_file, shorter, DenseConfig())
    small = faiss.IndexFlatIP(8)
    small.add(np.zeros((len(DOCS), 8), dtype=np.float32))
    faiss.write_index(small, str(tmp_path / "d8.index"))
    with pytest.raises(RetrievalError, match=r"384-dimensional vectors but .* 8-dimensional"):
        open_faiss_index(tmp_path / "d8.index", corpus, DenseConfig())
    (tmp_path / "junk.index").write_bytes(b"not faiss")
    with pytest.raises(RetrievalError, match="not a faiss index"):
        open_faiss_index(tmp_path / "junk.index", corpus, DenseConfig())


def test_corpus_rows_are_found_in_place(tmp_path: Path) -> None:
    rows = [{"id": "a", "contents": '"A"\nfirst'}, {"id": "b", "title": "B", "text": "second"}]
    path = tmp_path / "c.jsonl"
    path.write_bytes((json.dumps(rows[0]) + "\r\n\n" + json.dumps(rows[1])).encode())
    corpus = JsonlCorpus(path)
    assert len(corpus) == 2
    assert corpus[1] == Document("b", '"B"\nsecond') and corpus[-2].id == "a"
    with pytest.raises(IndexError):
        corpus[2]
    data = b"x\n\nyy\nz"
    starts, ends = line_spans(data, len(data))
    assert [data[s:e] for s, e in zip(starts, ends, strict=True)] == [b"x", b"yy", b"z"]
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(CorpusError, match="empty"):
        JsonlCorpus(tmp_path / "empty.jsonl")


def test_manifest_names_the_corpus_absolutely(
    corpus_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(corpus_file.parent)
    build_index("bm25", Path(corpus_file.name), tmp_path / "idx")
    recorded = read_manifest(tmp_path / "idx").corpus.path
    assert recorded == str(corpus_file.resolve()) and os.path.isabs(recorded)


def test_a_linked_faiss_index_opens_as_an_index_directory(
    search_r1_index: tuple[Path, Path], tmp_path: Path
) -> None:
    """`searchrl index --kind dense --faiss-index F --corpus C` writes only a manifest, and
    `load_index` (data.index_dir, eval --index, serve --index) then searches the external
    index exactly as `serve --faiss-index` does."""
    from typer.testing import CliRunner

    from searchrl.cli import app
    from searchrl.retrieval import load_index

    faiss_file, corpus = search_r1_index
    out = tmp_path / "wiki18_e5"
    args = ["index", "--kind", "dense", "--corpus", str(corpus), "--faiss-index", str(faiss_file),
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == ["manifest.json"]
    assert read_manifest(out).kind == "faiss"
    queries = ["tallest peak in the world", "a hot drink brewed from leaves"]
    direct = open_faiss_index(faiss_file, corpus, DenseConfig()).search(queries, 2)
    linked = load_index(out).search(queries, 2)
    assert [[h.document.id for h in hits] for hits in linked] == [
        [h.document.id for h in hits] for hits in direct
    ]
