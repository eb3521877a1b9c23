"""Comparison references: the two entities a question compares are read out of it, each is
searched, and the transcript answers from both passages (issue 64: the warm start never saw
a yes/no or "A or B" question)."""

from __future__ import annotations

import pytest

from searchrl.config.data import GroundingConfig
from searchrl.data.comparison import compared_entities, compares, comparison_answer
from searchrl.data.grounded import ground_references
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.types import Document, Question

DOCS = [
    Document("0", '"Scott Derrickson"\nScott Derrickson is an American director. Born 1966.'),
    Document("1", '"Ed Wood"\nEdward Davis Wood Jr. was an American filmmaker. He made films.'),
    Document("2", '"Blind Shaft"\nBlind Shaft is a 2003 film about coal miners.'),
    Document("3", '"The Mask of Fu Manchu"\nThe Mask of Fu Manchu is a 1932 film.'),
    Document("4", '"Thomas Mann"\nPaul Thomas Mann was a German novelist.'),
    Document("5", '"David Guterson"\nDavid Guterson is an American novelist.'),
]  # fmt: skip


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.build(DOCS)


@pytest.mark.parametrize(
    ("question", "pair"),
    [
        ("Were Scott Derrickson and Ed Wood of the same nationality?",
         ("Scott Derrickson", "Ed Wood")),
        ("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
         ("Blind Shaft", "The Mask Of Fu Manchu")),
        ("Who was born first Doug Liman or Saul Metzstein?", ("Doug Liman", "Saul Metzstein")),
        ("Which games, Strange Synergy or Qwirkle,  is a card game?",
         ("Strange Synergy", "Qwirkle")),
        ('Are both "Cooking Light" and "Vibe" magazines?', ("Cooking Light", "Vibe")),
        ("Are both Aloinopsis and Eriogonum ice plants?", ("Aloinopsis", "Eriogonum")),
        ("Which Karakoram mountain is higher: Distaghil Sar or The Crown",
         ("Distaghil Sar", "The Crown")),
        ("What profession does Matt Thiessen and George Thorogood have in common?",
         ("Matt Thiessen", "George Thorogood")),
        ("Where was Gustave Eiffel born?", None),
    ],
)  # fmt: skip
def test_the_two_entities_are_read_out_of_the_question(question, pair) -> None:
    assert compared_entities(question) == pair


def _q(uid: str, text: str, *golds: str, kind: str | None = None) -> Question:
    meta = {"type": kind} if kind else {}
    return Question(uid, text, golds, uid.split(":")[0], metadata=meta)


def test_which_questions_compare() -> None:
    assert compares(_q("h:1", "Were A and B born in the same city?", "yes"))
    assert compares(_q("h:2", "Which came first, Blind Shaft or Ed Wood?", "Ed Wood"))
    assert compares(_q("h:3", "What do A and B share?", "music", kind="comparison"))
    assert not compares(_q("n:1", "Where was Ed Wood born?", "Poughkeepsie"))


def test_the_answer_keeps_the_spelling_a_passage_or_the_question_gives() -> None:
    q = _q("h:1", "Which novelist was German, David Guterson or Thomas Mann?", "paul thomas mann")
    assert comparison_answer(q, ["Paul Thomas Mann was a German novelist."]) == "Paul Thomas Mann"
    assert comparison_answer(_q("h:2", "Is A older than B?", "Yes"), []) == "yes"
    assert comparison_answer(_q("h:3", "Is A or B older?", "C"), ["nothing here"]) is None


def test_a_comparison_reference_searches_both_entities_and_answers(retriever) -> None:
    yes = _q("hotpotqa:1", "Were Scott Derrickson and Ed Wood of the same nationality?", "yes")
    first = _q("hotpotqa:2", "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
               "The Mask of Fu Manchu")  # fmt: skip
    unknown = _q("hotpotqa:3", "Who is older, Ada Zorp or Bea Quill?", "Ada Zorp")
    shared = _q("hotpotqa:4", "What sport do Scott Derrickson and Ed Wood share?", "tennis")
    asked = [yes, first, unknown, shared]  # nothing shown says "tennis": no reference
    refs = ground_references(asked, retriever, 2, GroundingConfig(), progress=False)
    assert [r.id for r in refs] == ["hotpotqa:1", "hotpotqa:2", "hotpotqa:3"]
    unread = [s["text"] for s in refs[2].segments if s["role"] == "policy"]
    assert "The passages do not mention Ada Zorp." in unread[1]  # not in the corpus
    assert unread[2].endswith("<answer> Ada Zorp </answer>")
    ref = refs[0]
    policy = [s["text"] for s in ref.segments if s["role"] == "policy"]
    assert [s["role"] for s in ref.segments] == ["policy", "env", "policy", "env", "policy"]
    assert policy[0].endswith("<search> Scott Derrickson </search>")
    assert 'says: "Scott Derrickson is an American director."' in policy[1]
    assert policy[1].endswith("<search> Ed Wood </search>")
    assert "Edward Davis Wood Jr. was an American filmmaker." in policy[2]
    assert policy[2].endswith("<answer> yes </answer>") and ref.hops == 2
    assert refs[1].answer == "The Mask Of Fu Manchu"  # as the question spells it
    off = GroundingConfig(comparisons=False)
    assert ground_references([yes, first], retriever, 2, off, progress=False) == []
