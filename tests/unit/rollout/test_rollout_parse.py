"""Action parsing follows the Search-R1 rule exactly."""

from __future__ import annotations

from searchrl.rollout.parse import Action, parse_action


def test_first_complete_block_wins_and_content_is_stripped() -> None:
    text = "<think>hmm</think><search>\n capital of France \n</search><answer>x</answer>"
    assert parse_action(text) == Action("search", "capital of France")
    assert parse_action("a <answer> Paris </answer> <search>q</search>") == Action(
        "answer", "Paris"
    )


def test_mismatched_or_missing_tags_are_invalid() -> None:
    assert parse_action("<search> q </answer>") == Action("invalid")
    assert parse_action("I think the answer is Paris.") == Action("invalid")
    assert parse_action("<search> unfinished") == Action("invalid")


def test_empty_block_is_still_an_action() -> None:
    assert parse_action("<answer></answer>") == Action("answer", "")
