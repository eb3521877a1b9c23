"""Answer metrics: hand-checked cases plus properties of SQuAD-style normalization."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searchrl import exact_match, extract_answer, f1_score, normalize_answer, sub_exact_match
from searchrl.reward.metrics import answer_metrics

ASCII_TEXT = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " \t\n")
WORDS = st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6), max_size=6)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles!", "beatles"),
        ("  An   apple\tpie\n", "apple pie"),
        ("U.S.A.", "usa"),
        ("rock-n-roll", "rocknroll"),
        ("The Theatre of a Thousand", "theatre of thousand"),
        ("Anne and the Atheist", "anne and atheist"),
        ("Ça va, Éloïse?", "ça va éloïse"),
        ("a an the", ""),
        ("", ""),
    ],
)
def test_normalize_answer_by_hand(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("prediction", "golds", "em", "f1", "subem"),
    [
        ("Paris", ["paris"], 1.0, 1.0, 1.0),
        ("The Beatles!", ["beatles"], 1.0, 1.0, 1.0),
        ("Beatles band", ["The Beatles"], 0.0, 2 / 3, 1.0),
        ("president James Madison Jr", ["James Madison"], 0.0, 2 / 3, 1.0),
        ("Madison", ["James Madison", "Madison, James"], 0.0, 2 / 3, 0.0),
        ("London", ["Paris", "France"], 0.0, 0.0, 0.0),
        ("14 December 1972", ["14 December 1972 UTC", "December 1972"], 0.0, 6 / 7, 1.0),
        ("yes", ["no"], 0.0, 0.0, 0.0),
        ("yes it was", ["yes"], 0.0, 0.0, 1.0),
        ("no", ["no"], 1.0, 1.0, 1.0),
        ("the cat the cat", ["cat"], 0.0, 2 / 3, 1.0),
        ("", ["Paris"], 0.0, 0.0, 0.0),
        (None, ["Paris"], 0.0, 0.0, 0.0),
        ("anything", [], 0.0, 0.0, 0.0),
        ("Paris", "paris", 1.0, 1.0, 1.0),
    ],
)
def test_metrics_by_hand(prediction, golds, em, f1, subem) -> None:  # type: ignore[no-untyped-def]
    assert exact_match(prediction, golds) == em
    assert f1_score(prediction, golds) == pytest.approx(f1)
    assert sub_exact_match(prediction, golds) == subem


def test_an_answer_that_normalizes_to_nothing_does_not_match_everything() -> None:
    assert sub_exact_match("Paris", ["The"]) == 0.0
    assert exact_match("a", ["The"]) == 1.0
    assert f1_score("a", ["The"]) == 1.0
    assert f1_score("Paris", ["The"]) == 0.0


def test_answer_metrics_bundles_the_three() -> None:
    assert answer_metrics("Beatles band", ["The Beatles"]) == pytest.approx(
        {"em": 0.0, "f1": 2 / 3, "subem": 1.0}
    )


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think> hmm </think>\n<answer> Paris </answer>", "Paris"),
        ("<answer>first</answer> later <answer> second </answer>", "second"),
        ("<answer>\nmulti\nline\n</answer>", "multi\nline"),
        ("<answer> open <answer> inner </answer>", "inner"),
        ("<answer></answer>", ""),
        ("no tags at all", None),
        ("<answer> never closed", None),
        ("<search> q </search>", None),
    ],
)
def test_extract_answer_takes_the_last_block(response: str, expected: str | None) -> None:
    assert extract_answer(response) == expected


@given(st.text())
def test_normalization_is_idempotent(text: str) -> None:
    once = normalize_answer(text)
    assert normalize_answer(once) == once


@given(ASCII_TEXT)
def test_normalization_ignores_case(text: str) -> None:
    assert normalize_answer(text.upper()) == normalize_answer(text.lower())


@given(ASCII_TEXT, st.lists(st.sampled_from(string.punctuation), max_size=5), st.randoms())
def test_normalization_ignores_punctuation(text: str, marks: list[str], rnd) -> None:  # type: ignore[no-untyped-def]
    chars = list(text)
    for mark in marks:
        chars.insert(rnd.randint(0, len(chars)), mark)
    assert normalize_answer("".join(chars)) == normalize_answer(text)


@given(WORDS, st.sampled_from(["a", "an", "the", "The", "AN"]), st.integers(min_value=0))
def test_normalization_ignores_articles(words: list[str], article: str, where: int) -> None:
    with_article = list(words)
    with_article.insert(where % (len(words) + 1), article)
    assert normalize_answer(" ".join(with_article)) == normalize_answer(" ".join(words))


@given(WORDS, st.lists(st.sampled_from([" ", "  ", "\t", "\n"]), min_size=1, max_size=3))
def test_normalization_collapses_whitespace(words: list[str], gaps: list[str]) -> None:
    spaced = "".join(w + gaps[i % len(gaps)] for i, w in enumerate(words))
    assert normalize_answer(gaps[0] + spaced) == " ".join(
        w for w in words if w not in {"a", "an", "the"}
    )


@given(st.text(), st.lists(st.text(), max_size=3))
def test_metric_relations(prediction: str, golds: list[str]) -> None:
    em = exact_match(prediction, golds)
    f1 = f1_score(prediction, golds)
    subem = sub_exact_match(prediction, golds)
    assert 0.0 <= f1 <= 1.0
    if em == 1.0:
        assert f1 == 1.0
        assert subem == 1.0
    assert exact_match(prediction, [*golds, prediction]) == 1.0
    assert f1 == max((f1_score(prediction, [g]) for g in golds), default=0.0)
    assert subem == max((sub_exact_match(prediction, [g]) for g in golds), default=0.0)


@given(st.text(), st.text())
def test_f1_is_symmetric(a: str, b: str) -> None:
    assert f1_score(a, [b]) == pytest.approx(f1_score(b, [a]))
