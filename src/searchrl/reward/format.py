"""Search-R1 v0.3's format-aware reward, scored on the response only.

The released v0.3 code checks the format by searching the *decoded prompt + response* for
Qwen's `<|im_start|>assistant` marker, so it only works with one chat template. Here the check
runs on the response text the trajectory recorded (never the prompt), and trailing special
tokens of any template (`<|im_end|>`, `</s>`, `<eos>`, `<|eot_id|>`) are ignored.

Reward table (λ_s = `structure_format_score`, λ_f = `final_format_score`, λ_r =
`retrieval_score`; v0.3 defaults 0.2 / 0.1 / 0):

| answer correct | well-formed | reward          |
|----------------|-------------|-----------------|
| yes            | yes         | 1.0             |
| yes            | no          | 1 − λ_s (0.8)   |
| no / none      | yes         | λ_s (+ λ_r if a gold answer was retrieved) (0.2) |
| no             | no          | λ_f (0.1)       |
| none           | no          | 0               |
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchrl.reward.metrics import normalize_answer

_TAG = re.compile(r"(</?(?:think|search|information|answer)>)")
_TRAILING_SPECIAL = re.compile(r"(?:\s|<\|[^<>|]*\|>|</s>|<eos>)*\Z")
_INFORMATION = re.compile(r"<information>(.*?)</information>", re.DOTALL)

# state → {tag: next state}. Text is allowed only inside a block (`in_*` states); between
# blocks only whitespace may appear. A well-formed response ends in state `done`.
_TRANSITIONS: dict[str, dict[str, str]] = {
    "start": {"<think>": "in_think"},
    "in_think": {"</think>": "thought"},
    "thought": {"<search>": "in_search", "<answer>": "in_answer"},
    "in_search": {"</search>": "searched"},
    "searched": {"<information>": "in_information"},
    "in_information": {"</information>": "informed"},
    "informed": {"<think>": "in_think"},
    "in_answer": {"</answer>": "done"},
    "done": {},
}


def is_valid_sequence(response: str) -> bool:
    """Does the response follow think → (search → information → think)* → answer?"""
    body = _TRAILING_SPECIAL.sub("", response)
    state = "start"
    for piece in _TAG.split(body):
        if not piece:
            continue
        if _TAG.fullmatch(piece):
            nxt = _TRANSITIONS[state].get(piece)
            if nxt is None:
                return False
            state = nxt
        elif not state.startswith("in_") and piece.strip():
            return False
    return state == "done"


def retrieved_gold(response: str, golden_answers: Sequence[str]) -> bool:
    """Does any normalized gold answer occur in the retrieved `<information>` text?"""
    retrieved = normalize_answer(" ".join(_INFORMATION.findall(response)))
    return any(normalize_answer(g) and normalize_answer(g) in retrieved for g in golden_answers)


def format_reward(
    correct: bool | None,
    well_formed: bool,
    gold_retrieved: bool,
    *,
    structure_format_score: float,
    final_format_score: float,
    retrieval_score: float,
) -> float:
    """The v0.3 table; `correct` is None when the response gave no answer at all."""
    if correct:
        return 1.0 if well_formed else 1.0 - structure_format_score
    if well_formed:
        return structure_format_score + (retrieval_score if gold_retrieved else 0.0)
    return final_format_score if correct is not None else 0.0
