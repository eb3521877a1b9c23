"""The paper's judge prompt and the parser of its "Final Answer: N" replies."""

from __future__ import annotations

import pytest

from searchrl.reward.judges import Collection, JudgeRequest
from searchrl.reward.judges.prompt import parse_judgment, render_prompt


def test_prompt_carries_question_answer_criteria_and_every_collection() -> None:
    request = JudgeRequest(
        "Who founded Velmora Press?",
        ("Orin Vasket", "Vasket"),
        (Collection(("1",), '<information>Doc 1(Title: "A") a</information>'), Collection((), "")),
    )
    prompt = render_prompt(request)
    assert "Question: Who founded Velmora Press?" in prompt
    assert "Correct answer: Orin Vasket / Vasket" in prompt
    for phrase in ("Relevance", "Non-irrelevance", "Non-redundancy", "Final Answer: N"):
        assert phrase in prompt
    assert "Collection 1:\n<information>Doc 1" in prompt
    assert "Collection 2:\n(nothing was shown)" in prompt


@pytest.mark.parametrize(
    ("reply", "count", "useful"),
    [
        ("Collection 1: yes\nCollection 2: no\nFinal Answer: 1", 1, (True, False)),
        ("collection 1 - YES\ncollection 2: Yes\n**Final Answer:** 2", 2, (True, True)),
        (
            "<think>Collection 1: no ... Final Answer: 0</think>\nFinal Answer: $\\boxed{2}$",
            2,
            None,
        ),
        ("Both look fine. Final answer: 2", 2, None),  # no per-collection lines: count only
        ("Collection 1: yes\nCollection 2: yes\nFinal Answer: 1", 1, None),  # inconsistent
        ("Final Answer: 0\nFinal Answer: 1", 1, None),  # the last one counts
    ],
)
def test_parses_good_replies(reply: str, count: int, useful: tuple[bool, ...] | None) -> None:
    judgment = parse_judgment(reply, searches=2)
    assert judgment.error == ""
    assert judgment.count == count and judgment.useful == useful
    assert judgment.process(2) == count / 2


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("I think the first one helps.", "no 'Final Answer: N'"),
        ("Final Answer: 3", "Final Answer 3 for 2 collections"),
        ("Final Answer: -1", "Final Answer -1 for 2 collections"),
        ("<think>Final Answer: 1</think> I am not sure.", "no 'Final Answer: N'"),
        ("", "no 'Final Answer: N'"),
    ],
)
def test_malformed_replies_are_judgments_not_exceptions(reply: str, why: str) -> None:
    judgment = parse_judgment(reply, searches=2)
    assert judgment.count is None and judgment.error.startswith("malformed:")
    assert why in judgment.error
    assert judgment.process(2) == 0.0
