"""Property-based tests (hypothesis) of the pure text functions every rollout and every score
passes through: the action parser, answer extraction, the `<information>` formatter and the
answer metrics, on arbitrary unicode, nested and unbalanced tags, and huge strings."""

from __future__ import annotations

import re
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from searchrl.data.templates import INFORMATION_CLOSE, INFORMATION_OPEN, format_information
from searchrl.reward.metrics import (
    answer_metrics,
    exact_match,
    extract_answer,
    f1_score,
    normalize_answer,
    sub_exact_match,
)
from searchrl.rollout.parse import Action, parse_action

SEARCH_R1_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
TAGS = ["<search>", "</search>", "<answer>", "</answer>", "<information>", "</information>",
        "<think>", "</think>", "<", ">", "/", "search", "answer"]  # fmt: skip
PIECES = st.one_of(st.sampled_from(TAGS), st.text(max_size=6))
TAGGED = st.lists(PIECES, max_size=30).map("".join)
"""Text made of tag fragments and arbitrary unicode: nested, unbalanced and broken tags."""
ANY_TEXT = st.one_of(st.text(), TAGGED)
CHECKS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def search_r1_action(text: str) -> Action:
    """The rule as Search-R1 wrote it (one regex), the reference the parser must agree with."""
    match = SEARCH_R1_ACTION.search(text)
    if match is None:
        return Action("invalid")
    return Action("search" if match.group(1) == "search" else "answer", match.group(2).strip())


@CHECKS
@given(ANY_TEXT)
def test_parser_agrees_with_search_r1s_regex(text: str) -> None:
    assert parse_action(text) == search_r1_action(text)


@CHECKS
@given(TAGGED, TAGGED, st.sampled_from(["search", "answer"]), TAGGED)
def test_a_complete_block_is_always_found(before: str, body: str, kind: str, after: str) -> None:
    text = f"{before}<{kind}>{body}</{kind}>{after}"
    action = parse_action(text)
    assert action.kind != "invalid"
    assert action.content == action.content.strip()
    assert f"<{action.kind}>" in text and action.content in text


@CHECKS
@given(ANY_TEXT)
def test_extracted_answer_is_a_stripped_block_without_an_opening_tag(text: str) -> None:
    answer = extract_answer(text)
    if answer is None:
        assert re.search(r"<answer>((?:(?!<answer>).)*?)</answer>", text, re.DOTALL) is None
    else:
        assert answer == answer.strip() and "<answer>" not in answer
        assert f"{answer}" in text and "</answer>" in text


def without_answer_tags(text: str) -> str:
    """`text` with every answer tag removed, including those a removal forms
    ("<<answer>answer>" → "<answer>" → "")."""
    while "<answer>" in text or "</answer>" in text:
        text = text.replace("<answer>", "").replace("</answer>", "")
    return text


@CHECKS
@given(TAGGED, TAGGED)
@example(first="", last="<<answer>answer>")  # one pass of removal left a tag (CI, 5 Dec 2026)
def test_the_last_answer_block_wins(first: str, last: str) -> None:
    clean = without_answer_tags(last)
    text = f"<answer>{first}</answer> ... <answer>{clean}</answer>"
    assert extract_answer(text) == clean.strip()


@CHECKS
@given(st.lists(st.text(), max_size=6))
def test_information_block_shape(passages: list[str]) -> None:
    block = format_information(passages)
    assert block.startswith(INFORMATION_OPEN) and block.endswith(INFORMATION_CLOSE)
    position = 0
    for i, contents in enumerate(passages, start=1):
        title = contents.partition("\n")[0]
        header = f"Doc {i}(Title: {title})"
        found = block.find(header, position)
        assert found >= 0, (i, header)
        position = found + len(header)


@CHECKS
@given(ANY_TEXT)
def test_normalization_is_idempotent_and_clean(text: str) -> None:
    once = normalize_answer(text)
    assert normalize_answer(once) == once
    assert once == once.strip() and "  " not in once
    assert not re.search(r"\b(a|an|the)\b", once)


@CHECKS
@given(ANY_TEXT, st.lists(ANY_TEXT, min_size=1, max_size=4))
def test_metrics_are_bounded_and_ordered(prediction: str, golds: list[str]) -> None:
    scores = answer_metrics(prediction, golds)
    assert all(0.0 <= v <= 1.0 for v in scores.values())
    if scores["em"] == 1.0:
        assert scores["f1"] == 1.0 and scores["subem"] == 1.0
    assert exact_match(prediction, [prediction]) == 1.0
    assert f1_score(prediction, [prediction]) == 1.0
    assert answer_metrics(None, golds) == {"em": 0.0, "f1": 0.0, "subem": 0.0}


@CHECKS
@given(ANY_TEXT, ANY_TEXT, st.lists(ANY_TEXT, max_size=3))
def test_more_golden_answers_never_lower_a_score(
    prediction: str, gold: str, more: list[str]
) -> None:
    for metric in (exact_match, f1_score, sub_exact_match):
        assert metric(prediction, [gold, *more]) >= metric(prediction, [gold])


@CHECKS
@given(ANY_TEXT, ANY_TEXT)
def test_f1_is_symmetric(a: str, b: str) -> None:
    assert f1_score(a, [b]) == f1_score(b, [a])


def test_huge_and_pathological_strings_take_linear_time() -> None:
    """A model can emit thousands of unclosed tags; every function stays well under a second
    on a megabyte (Search-R1's action regex took 17 s on 16,000 unclosed `<search>` tags)."""
    cases = [
        "<search>" * 150_000,
        "<answer>" + "<search>" * 150_000,
        "<answer>x " * 100_000,
        ("é the 😀 " * 150_000) + "<answer> Paris </answer>",
        "</search>" * 100_000 + "<search> q </search>",
    ]
    for text in cases:
        started = time.perf_counter()
        parse_action(text)
        extract_answer(text)
        answer_metrics(text[:200_000], [text[-100_000:]])
        format_information([text[:100_000]] * 3)
        assert time.perf_counter() - started < 2.0, text[:40]
    assert parse_action("<search>" * 150_000) == Action("invalid")
    assert parse_action("</search>" * 100_000 + "<search> q </search>") == Action("search", "q")
