"""Reference trajectories corrupted at a known step: labelled data for the Meta-Refiner.

The world knows what a correct transcript looks like (the scripted solver's), so a flaw put in
at step k makes k the earliest flawed step, and a clean reference is label 0. Two flaws, the
two the paper's Figure 1 describes (wrong entity retrieved, evidence misread):

- `distractor` (a search step k < T): the query names another entity of the world (a namesake,
  a near-duplicate or any other) instead of the one the chain needs; its real search results
  are inserted, and the next, final step answers with a wrong value. T = k + 1.
- `misread` (the answer step T, T ≥ 2): the correct passages were retrieved, but the answer step
  states and answers a wrong value (another question's answer) in place of the one read.

Only steps up to the flaw (and the one final step after a wrong search) are written, so the
transcript stays plausible: nothing after the flaw depends on information it never retrieved.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from searchrl.data.templates import format_information
from searchrl.data.world.solver import Reference
from searchrl.retrieval.base import Retriever
from searchrl.reward.metrics import exact_match

Flaw = Literal["distractor", "misread"]
_SEARCH = re.compile(r"<search>\s*(.*?)\s*</search>", re.DOTALL)


def policy_steps(reference: Reference) -> list[int]:
    """Segment indices of the policy turns (step i is `policy_steps(...)[i - 1]`)."""
    return [i for i, s in enumerate(reference.segments) if s["role"] == "policy"]


def _wrong_answer(reference: Reference, pool: Sequence[Reference], rng: random.Random) -> str:
    """Another question's answer that is not right here."""
    options = [
        r.answer for r in pool if r.answer and exact_match(r.answer, reference.golden_answers) == 0
    ]
    return rng.choice(options) if options else "unknown"


def _search_query(text: str) -> str | None:
    match = _SEARCH.search(text)
    return match.group(1) if match else None


def _misread(reference: Reference, pool: Sequence[Reference], rng: random.Random) -> Reference:
    steps = policy_steps(reference)
    last = reference.segments[steps[-1]]
    wrong = _wrong_answer(reference, pool, rng)
    text = last["text"].replace(reference.answer, wrong)
    if wrong not in text:  # the right value is not written verbatim: answer the wrong one
        text = re.sub(r"<answer>.*?</answer>", f"<answer> {wrong} </answer>", text, flags=re.S)
    segments = (*reference.segments[: steps[-1]], {"role": "policy", "text": text})
    return replace(reference, segments=segments, answer=wrong, em=0.0)


def _distractor(
    reference: Reference,
    step: int,
    pool: Sequence[Reference],
    retriever: Retriever,
    k: int,
    rng: random.Random,
) -> Reference:
    steps = policy_steps(reference)
    turn = reference.segments[steps[step - 1]]
    query = _search_query(turn["text"]) or ""
    name, _, keyword = query.rpartition(" ")
    names = sorted(
        {
            q.rpartition(" ")[0]
            for r in pool
            for s in r.segments
            if s["role"] == "policy" and (q := _search_query(s["text"]))
        }
        - {name}
    )
    other = rng.choice(names) if names else "someone else"
    bad_query = f"{other} {keyword}"
    (hits,) = retriever.search([bad_query], k)
    wrong = _wrong_answer(reference, pool, rng)
    segments = (
        *reference.segments[: steps[step - 1]],
        {
            "role": "policy",
            "text": turn["text"].replace(
                f"<search> {query} </search>", f"<search> {bad_query} </search>"
            ),
        },
        {"role": "env", "text": format_information([h.document.contents for h in hits])},
        {
            "role": "policy",
            "text": f"<think> So the answer is {wrong}. </think>\n<answer> {wrong} </answer>",
        },
    )
    return replace(reference, segments=segments, answer=wrong, em=0.0)


def corrupt(
    reference: Reference,
    pool: Sequence[Reference],
    rng: random.Random,
    retriever: Retriever | None = None,
    k: int = 3,
) -> tuple[Reference, int] | None:
    """A corrupted copy of a (solved) reference and its earliest flawed step, or None when
    it has no step that can be corrupted (a one-step transcript without a retriever). With a
    retriever, a search step or the answer step is picked uniformly; without, the answer."""
    steps = policy_steps(reference)
    choices: list[tuple[Flaw, int]] = []
    if len(steps) >= 2:
        choices.append(("misread", len(steps)))
    if retriever is not None:
        choices += [("distractor", s) for s in range(1, len(steps))]
    if not choices:
        return None
    flaw, step = rng.choice(choices)
    if flaw == "misread":
        return _misread(reference, pool, rng), step
    assert retriever is not None
    return _distractor(reference, step, pool, retriever, k, rng), step
