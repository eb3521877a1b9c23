"""Prompt templates: the Search-R1 one byte for byte as published, and the baselines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from searchrl import search_r1_prompt
from searchrl.data.templates import cot_prompt, direct_prompt, r1_prompt, rag_prompt
from searchrl.reward.metrics import extract_answer

SPEC = Path(__file__).resolve().parents[4] / "shared" / "SPEC.md"
PUBLISHED = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: who wrote hamlet?\n"
)


def test_search_r1_prompt_bytes() -> None:
    assert search_r1_prompt("  who wrote hamlet ").encode() == PUBLISHED.encode()
    assert search_r1_prompt("who wrote hamlet?") == PUBLISHED


def test_search_r1_prompt_equals_the_text_in_spec() -> None:
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} not found")
    match = re.search(r"`(Answer the given question\..*?)`", SPEC.read_text(), re.DOTALL)
    assert match, "the prompt is no longer quoted in SPEC.md"
    published = match.group(1).replace("\\n", "\n").format(question="who wrote hamlet?")
    assert search_r1_prompt("who wrote hamlet") == published


@pytest.mark.parametrize("make", [direct_prompt, cot_prompt, r1_prompt])
def test_baseline_prompts(make) -> None:  # type: ignore[no-untyped-def]
    text = make(" Who wrote Hamlet ")
    assert text.endswith("Question: Who wrote Hamlet?\n")
    assert "<search>" not in text
    assert extract_answer(text) == "Beijing"


def test_rag_prompt_shows_documents_as_search_r1_does() -> None:
    text = rag_prompt("who wrote hamlet", ['"Hamlet"\nA tragedy by Shakespeare.', '"X"\nY'])
    assert 'Doc 1(Title: "Hamlet") A tragedy by Shakespeare.\nDoc 2(Title: "X") Y\n\n' in text
    assert text.endswith("Question: who wrote hamlet?\n")
