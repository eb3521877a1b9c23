"""Grounded references for real questions: kept only when the search engine shows a gold
answer, a bridge search only through the bridge entity's own passage, and nothing the
policy would not be shown."""

from __future__ import annotations

import pytest

from searchrl.config.data import GroundingConfig
from searchrl.data.grounded import answer_recall, find_evidence, ground_references, groundable
from searchrl.data.templates import format_information
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.types import Document, Hit, Question

DOCS = [
    Document("0", '"Glass Castle (film)"\nPrincipal photography began in Welch, West Virginia.'),
    Document("1", '"Zorblat Film"\nZorblat Film is a drama directed by Quentin Marlowe.'),
    Document("2", '"Quentin Marlowe"\nQuentin Marlowe is a director. He was born in Ostrava.'),
    Document("3", '"Fennel"\nFennel is a herb; the American cooks use fennel seeds.'),
    Document("4", '"Ostrava"\nOstrava is a city in the Czech Republic.'),
]


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.build(DOCS)


def _q(uid: str, text: str, *golds: str) -> Question:
    return Question(uid=uid, question=text, golden_answers=golds, source=uid.split(":")[0])


def _policy_texts(ref) -> list[str]:
    return [s["text"] for s in ref.segments if s["role"] == "policy"]


def test_one_search_reference_copies_the_passage_spelling(retriever: BM25Retriever) -> None:
    question = _q("nq:1", "where was the movie glass castle filmed", "welch, west virginia")
    (ref,) = ground_references([question], retriever, 2, GroundingConfig(), progress=False)
    policy = _policy_texts(ref)
    assert policy[0].endswith("<search> where was the movie glass castle filmed </search>")
    assert ref.answer == "Welch, West Virginia" and ref.hops == 1 and ref.em == 1.0
    assert 'Doc 1 says: "Principal photography began in Welch, West Virginia."' in policy[1]
    assert policy[1].endswith("<answer> Welch, West Virginia </answer>")
    assert ref.segments[1]["role"] == "env"
    assert ref.segments[1]["text"].startswith("\n\n<information>Doc 1(Title: ")


def test_bridge_search_goes_through_the_entity_named_in_the_first_passages(
    retriever: BM25Retriever,
) -> None:
    question = _q("hotpotqa:7", "Where was the maker of Zorblat Film born?", "Ostrava")
    no_bridge = GroundingConfig(bridge=False)
    assert ground_references([question], retriever, 1, no_bridge, progress=False) == []
    (ref,) = ground_references([question], retriever, 1, GroundingConfig(), progress=False)
    policy = _policy_texts(ref)
    assert ref.hops == 2 and ref.answer == "Ostrava"
    assert "Doc 1 mentions Quentin Marlowe." in policy[1]
    assert policy[1].endswith("<search> Quentin Marlowe </search>")


def test_a_bridge_answer_in_another_entitys_passage_does_not_count(
    retriever: BM25Retriever,
) -> None:
    # "American" stands in the fennel passage, which no entity of the first search is about
    question = _q("hotpotqa:8", "What nationality is the maker of Zorblat Film?", "American")
    refs = ground_references([question], retriever, 1, GroundingConfig(), progress=False)
    assert refs == []


def test_yes_no_and_answers_inside_the_question_are_not_groundable() -> None:
    assert groundable(_q("h:1", "Is Ostrava a city?", "yes")) == []
    assert groundable(_q("h:2", "Which is older, Ostrava or Welch?", "Ostrava")) == []
    assert groundable(_q("h:3", "Where was he born?", "no", "Ostrava")) == ["Ostrava"]


def test_an_answer_the_rollout_would_cut_off_is_not_evidence() -> None:
    hits = [Hit(DOCS[2], 1.0)]
    shown = format_information([h.document.contents for h in hits])
    assert find_evidence(shown, ["Ostrava"], 30) is not None
    cut = shown[: shown.index("Ostrava")] + "</information>\n\n"
    assert find_evidence(cut, ["Ostrava"], 30) is None


def test_answer_recall_is_whole_normalized_words() -> None:
    hits = [Hit(DOCS[4], 1.0)]
    assert answer_recall(hits, ["the Czech Republic"])
    assert not answer_recall(hits, ["Czech Rep"])
