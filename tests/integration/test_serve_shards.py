"""`searchrl serve --index A --index B`: two indexes built from two halves of a corpus,
served by real processes on 127.0.0.1 behind one `/retrieve`, answer like one index over the
whole corpus; the shard servers die with the front."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import urllib3

from searchrl.config.data import WorldConfig
from searchrl.config.retrieval import DenseConfig, RetrievalConfig
from searchrl.data.world import generate_world
from searchrl.retrieval import RemoteRetriever, build_index, load_index
from searchrl.retrieval.shards import free_port
from searchrl.types import Document, Hit


@pytest.fixture(scope="module")
def halves(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, list[str]]:
    """A world corpus of ~500 passages, its two halves, and questions about it."""
    world = generate_world(WorldConfig(num_entities=200, seed=5, test_questions=40))
    docs: list[Document] = world.documents
    out = tmp_path_factory.mktemp("halves")
    paths = []
    middle = len(docs) // 2
    for name, part in (("whole", docs), ("a", docs[:middle]), ("b", docs[middle:])):
        path = out / f"{name}.jsonl"
        rows = [json.dumps({"id": d.id, "contents": d.contents}) + "\n" for d in part]
        path.write_text("".join(rows))
        paths.append(path)
    questions = [q.question for q in world.questions["test"]] + ["the city", "born in", "Press"]
    return paths[0], paths[1], paths[2], questions


@contextlib.contextmanager
def serving(*args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`searchrl serve ARGS` on a free port; yields its base URL and process once healthy."""
    port = free_port()
    command = [sys.executable, "-m", "searchrl", "serve", *args, "--port", str(port)]
    front = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    try:
        while True:
            assert front.poll() is None, "the front server exited"
            try:
                if urllib3.request("GET", f"{url}/health", timeout=2, retries=False).status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                pass
            assert time.monotonic() < deadline, "the front server never became healthy"
            time.sleep(0.3)
        yield url, front
    finally:
        front.terminate()
        front.wait(timeout=60)


def ids_and_scores(hits: list[list[Hit]]) -> list[list[tuple[str, float]]]:
    return [[(h.document.id, round(h.score, 4)) for h in top] for top in hits]


def test_bm25_halves_served_as_one_answer_like_the_whole(
    halves: tuple[Path, Path, Path, list[str]], tmp_path: Path
) -> None:
    whole_corpus, a, b, questions = halves
    whole = load_index(build_index("bm25", whole_corpus, tmp_path / "whole"))
    shard_a = build_index("bm25", a, tmp_path / "a")
    shard_b = build_index("bm25", b, tmp_path / "b")
    shards = ("--index", str(shard_a), "--index", str(shard_b))
    with serving(*shards) as (url, _), RemoteRetriever(f"{url}/retrieve") as client:
        for k in (3, 10):
            got = ids_and_scores(client.search(questions, k))
            assert got == ids_and_scores(whole.search(questions, k))


def test_dense_halves_served_as_one_answer_like_the_whole(
    halves: tuple[Path, Path, Path, list[str]], tmp_path: Path
) -> None:
    pytest.importorskip("faiss")
    whole_corpus, a, b, questions = halves
    config = RetrievalConfig(dense=DenseConfig(torch_threads=1))
    whole = load_index(build_index("dense", whole_corpus, tmp_path / "whole", config))
    shard_a = build_index("dense", a, tmp_path / "a", config)
    shard_b = build_index("dense", b, tmp_path / "b", config)
    shards = ("--index", str(shard_a), "--index", str(shard_b))
    with serving(*shards) as (url, _), RemoteRetriever(f"{url}/retrieve") as client:
        got = client.search(questions[:20], 3)
    expected = whole.search(questions[:20], 3)
    assert [[h.document.id for h in top] for top in got] == [
        [h.document.id for h in top] for top in expected
    ]


def test_sharded_build_is_served_by_one_process_per_shard(
    halves: tuple[Path, Path, Path, list[str]], tmp_path: Path
) -> None:
    whole_corpus, _, _, questions = halves
    whole = load_index(build_index("bm25", whole_corpus, tmp_path / "whole"))
    sharded = build_index("bm25", whole_corpus, tmp_path / "sharded", shards=2)
    with serving("--index", str(sharded)) as (url, process):
        front = psutil.Process(process.pid)
        children = front.children()
        assert len(children) == 2  # one `searchrl serve` per shard
        with RemoteRetriever(f"{url}/retrieve") as client:
            assert ids_and_scores(client.search(questions, 5)) == ids_and_scores(
                whole.search(questions, 5)
            )
        os.kill(front.pid, signal.SIGKILL)  # a killed front takes its shard servers along
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive


def test_ivfpq_shards_sharing_training_answer_like_one_ivfpq_index(
    halves: tuple[Path, Path, Path, list[str]], tmp_path: Path
) -> None:
    pytest.importorskip("faiss")
    whole_corpus, _, _, questions = halves
    config = RetrievalConfig(dense=DenseConfig(index_type="ivfpq", torch_threads=1))
    one = build_index("dense", whole_corpus, tmp_path / "whole", config)
    whole = load_index(one, config=config)
    sharded = build_index("dense", whole_corpus, tmp_path / "sharded", config, shards=2)
    assert (sharded / "shard-001" / "faiss.index").exists()
    merged = load_index(sharded, config=config)
    assert ids_and_scores(merged.search(questions, 5)) == ids_and_scores(whole.search(questions, 5))
