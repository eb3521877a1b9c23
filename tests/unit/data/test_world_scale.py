"""The scale corpus generator: blocks of worlds renumbered into one corpus, questions whose
gold passages are known, deterministic output, and resuming after a kill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.data.world.scale import STATE_FILE, ScaleCorpus, write_scale_corpus

SPEC = ScaleCorpus(passages=2500, seed=1, block_entities=300, questions_per_block=15)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scale")
    write_scale_corpus(SPEC, out)
    return out


def test_exact_size_consecutive_ids_and_several_blocks(made: Path) -> None:
    corpus = rows(made / "corpus.jsonl")
    manifest = json.loads((made / "manifest.json").read_text())
    assert [r["id"] for r in corpus] == [str(i) for i in range(2500)]
    assert manifest["passages"] == 2500 and manifest["blocks"] >= 3
    assert all(r["contents"].startswith('"') and "\n" in r["contents"] for r in corpus)
    assert not (made / STATE_FILE).exists()


def test_gold_passages_hold_the_answers_of_one_hop_questions(made: Path) -> None:
    corpus = {r["id"]: r["contents"] for r in rows(made / "corpus.jsonl")}
    questions = rows(made / "questions.jsonl")
    assert len(questions) == json.loads((made / "manifest.json").read_text())["questions"] > 20
    one_hop = [q for q in questions if q["hops"] == 1]
    assert one_hop
    for q in one_hop:
        assert all(g in corpus for g in q["gold_ids"])
        texts = " ".join(corpus[g] for g in q["gold_ids"])
        assert any(a in texts for a in q["golden_answers"]), q


def test_resume_after_a_kill_gives_the_same_bytes(made: Path, tmp_path: Path) -> None:
    seen = []

    def kill_after_two_blocks(n: int) -> None:
        seen.append(n)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_scale_corpus(SPEC, tmp_path, kill_after_two_blocks)
    assert (tmp_path / STATE_FILE).exists() and not (tmp_path / "manifest.json").exists()
    with (tmp_path / "corpus.jsonl").open("a") as handle:
        handle.write('{"id": "half-written')  # what a kill mid-block leaves behind
    write_scale_corpus(SPEC, tmp_path)
    for name in ("corpus.jsonl", "questions.jsonl"):
        assert (tmp_path / name).read_bytes() == (made / name).read_bytes()


def test_another_spec_is_refused(made: Path) -> None:
    with pytest.raises(ValueError, match="another spec"):
        write_scale_corpus(ScaleCorpus(passages=10), made)
