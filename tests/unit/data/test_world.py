"""The synthetic world: deterministic, solvable by searching, and free of accidental answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from searchrl.config.data import WorldConfig, world_preset
from searchrl.data.templates import format_information
from searchrl.data.world import (
    World,
    generate_world,
    load_references,
    solve,
    solver_accuracy,
    write_world,
)
from searchrl.data.world.schema import RELATIONS, parse_fact, title_of_mention
from searchrl.retrieval.bm25 import BM25Retriever


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(world_preset("test"))


def test_same_seed_same_files(tmp_path: Path) -> None:
    config = world_preset("test")
    for name in ("a", "b"):
        world = generate_world(config)
        write_world(world, tmp_path / name, BM25Retriever.build(world.documents))
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert {"corpus.jsonl", "train.jsonl", "references_test.jsonl"} <= set(files)
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_other_seed_other_world() -> None:
    a = generate_world(world_preset("test"))
    b = generate_world(WorldConfig(**{**world_preset("test").__dict__, "seed": 1}))
    assert a.documents != b.documents


def test_every_hop_count_is_solved_by_search(world: World) -> None:
    questions = [q for qs in world.questions.values() for q in qs]
    refs = solve(questions, BM25Retriever.build(world.documents), k=3)
    accuracy = solver_accuracy(refs)
    assert set(accuracy) == {1, 2, 3, 4}
    assert all(em >= 0.95 for em in accuracy.values()), accuracy


def test_reference_transcripts_have_the_search_r1_shape(world: World, tmp_path: Path) -> None:
    retriever = BM25Retriever.build(world.documents)
    refs = solve(world.questions["dev"], retriever, k=3)
    for ref in refs:
        roles = [s["role"] for s in ref.segments]
        assert roles == ["policy", "env"] * (len(roles) // 2) + ["policy"]
        searches = [s["text"] for s in ref.segments[:-1:2]]
        assert all(re.fullmatch(r"<think> .+ </think>\n<search> .+ </search>", t) for t in searches)
        assert re.fullmatch(r"<think> .+ </think>\n<answer> .+ </answer>", ref.segments[-1]["text"])
        for policy, env in zip(ref.segments[:-1:2], ref.segments[1::2], strict=True):
            query = re.search(r"<search> (.+) </search>", policy["text"]).group(1)
            hits = retriever.search([query], 3)[0]
            assert env["text"] == format_information([h.document.contents for h in hits])
        assert len(ref.segments) == 2 * ref.hops + 1
    write_world(world, tmp_path, retriever)
    path = tmp_path / "references_dev.jsonl"
    assert load_references(path) == refs


def test_no_answer_leaks_into_a_passage_by_accident(world: World) -> None:
    """A gold answer may occur in a passage only where the generator put it on purpose."""
    answers = {a for qs in world.questions.values() for q in qs for a in q.golden_answers}
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(a) for a in sorted(answers, key=len, reverse=True)) + r")\b",
        re.IGNORECASE,
    )
    lower = {a.lower(): a for a in answers}
    for passage in world.passages:
        declared = {m.lower() for m in passage.mentions}
        for match in pattern.finditer(passage.document.contents):
            found = match.group(1).lower()
            assert found in declared, (lower[found], passage.document.contents)


def test_questions_are_unique_with_unique_uids(world: World) -> None:
    questions = [q for qs in world.questions.values() for q in qs]
    assert len({q.uid for q in questions}) == len(questions)
    assert len({q.question for q in questions}) == len(questions)
    assert all(q.hops == len(q.metadata["relations"]) for q in questions)


def test_world_has_distractors(world: World) -> None:
    titles = [e.title for e in world.entities]
    assert len(set(titles)) == len(titles)
    assert any(e.disambiguated for e in world.entities)
    assert any(e.twin_of is not None and not e.disambiguated for e in world.entities)


@pytest.mark.parametrize("rel", RELATIONS, ids=lambda r: r.name)
def test_each_phrasing_parses_back(rel) -> None:  # type: ignore[no-untyped-def]
    value = {"year": "1903", "occupation": "poet", "name": "Drelm"}.get(rel.target, "Vasket Press")
    for sentence in rel.sentences:
        text = "Filler words here. " + sentence.format(s="Orin Vasket", o=value)
        assert parse_fact(rel.name, text) == value


def test_namesake_mentions_map_to_titles() -> None:
    assert title_of_mention("the painter Orin Vasket") == "Orin Vasket (painter)"
    assert title_of_mention("Orin Vasket") == "Orin Vasket"
    text = "The painter Orin Vasket is the founder of Vasket Press."
    assert parse_fact("founder", text) == "the painter Orin Vasket"
