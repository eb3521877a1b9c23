"""The process judge's prompt and the parser of its answers (seed 001 Appendix K, Table 11).

The seed describes the judge's input (the question, its correct answer, all M collections in
chronological order), its three criteria (relevance to finding the answer, not completely
irrelevant, not merely duplicating earlier collections), its decoding (greedy, temperature 0,
up to 3,000 tokens) and its output ("Final Answer: N", the number of useful collections). The
wording below is ours, written from that description; it additionally asks for one
`Collection i: yes|no` line per collection so u_i can be compared with the oracle's.
"""

from __future__ import annotations

import re

from searchrl.reward.judges.base import JudgeRequest, Judgment

JUDGE_PROMPT = """You are a strict judge of search results. Given a question, its correct \
answer, and the collections of documents a search assistant retrieved while answering it (in \
the order it retrieved them), decide for each collection whether it is useful.

A collection is useful only if all three hold:
1. Relevance: it contains information that helps to identify the correct answer, even \
partially.
2. Non-irrelevance: it is not completely irrelevant to the question.
3. Non-redundancy: it does not merely repeat information from earlier collections without \
adding anything new.

Question: {question}
Correct answer: {answer}

{collections}

For each collection write one line "Collection i: yes" or "Collection i: no". Then, on the \
last line, write the number of useful collections as "Final Answer: N"."""

_FINAL = re.compile(
    r"final\s+answer\s*\**\s*[:：]\s*\**\s*(?:\$?\s*\\boxed\{\s*)?(-?\d+)", re.IGNORECASE
)
_VERDICT = re.compile(r"collection\s+(\d+)\s*\**\s*[:：\-]\s*\**\s*(yes|no)\b", re.IGNORECASE)
_THINK_END = "</think>"


def render_prompt(request: JudgeRequest) -> str:
    """The judge prompt for one trajectory's collections."""
    blocks = [
        f"Collection {i}:\n{c.text.strip() or '(nothing was shown)'}"
        for i, c in enumerate(request.collections, start=1)
    ]
    return JUDGE_PROMPT.format(
        question=request.question.strip(),
        answer=" / ".join(request.golden_answers),
        collections="\n\n".join(blocks),
    )


def parse_judgment(text: str, searches: int) -> Judgment:
    """The verdict in a judge's reply. The count is the last "Final Answer: N" (bold,
    `\\boxed{N}` and a reasoning model's `<think>` block are tolerated); it must lie in
    [0, M]. Per-collection verdicts are read after the reasoning and kept only when every
    collection has one and they add up to N. Anything else is a `malformed:` judgment."""
    answer = text.rsplit(_THINK_END, 1)[-1]
    finals = _FINAL.findall(answer)
    if not finals:
        return Judgment(None, error=f"malformed: no 'Final Answer: N' in {_snippet(text)}")
    count = int(finals[-1])
    if not 0 <= count <= searches:
        return Judgment(None, error=f"malformed: Final Answer {count} for {searches} collections")
    verdicts: dict[int, bool] = {}
    for index, word in _VERDICT.findall(answer):
        verdicts[int(index)] = word.lower() == "yes"
    useful = tuple(verdicts.get(i) for i in range(1, searches + 1))
    if None in useful or sum(bool(u) for u in useful) != count:
        return Judgment(count)
    return Judgment(count, tuple(bool(u) for u in useful))


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 120 else flat[:60] + " … " + flat[-50:])
