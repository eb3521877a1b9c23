"""A scripted searcher that writes reference trajectories in the exact Search-R1 format.

It knows which relations a question chains (that is what "scripted" means) but not the
entities along the way: each hop it searches with a short query, reads the retrieved
passages of the entity it is looking for, and takes the next entity from their text. So its
exact match measures whether the corpus and a real retriever make the question solvable, and
its transcripts are supervised warm-start demonstrations (short thoughts for a small model).

The thoughts carry a plan: the first one lists the relations the question chains ("Plan:
publisher, headquarters, country."), each later one the steps still left, and the last one says
none is left. Without it, a 135M model warm-started on these transcripts read every fact
correctly but kept chaining past the question (after SFT on 300 transcripts: 2.2 searches per
1-hop question and EM 0.48 there); with the plan, knowing when to answer is copying a shrinking
list rather than re-parsing a nested question at every turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.data.templates import format_information
from searchrl.data.world.schema import (
    Relation,
    name_of_mention,
    parse_fact,
    query_of_mention,
    relation,
    title_of_mention,
)
from searchrl.retrieval.base import Retriever
from searchrl.reward.metrics import exact_match
from searchrl.types import Hit, Question

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Reference:
    """One solved (or failed) question as a Search-R1 transcript."""

    id: str
    question: str
    golden_answers: tuple[str, ...]
    hops: int
    segments: tuple[dict[str, str], ...]
    """`{"role": "policy"|"env", "text": ...}` in order; concatenated they are the response."""
    answer: str
    em: float

    def to_json(self) -> dict[str, Any]:
        """The JSONL row: id, question, golden_answers, hops, segments, answer, em."""
        row = dict(self.__dict__)
        row["golden_answers"] = list(self.golden_answers)
        row["segments"] = [dict(s) for s in self.segments]
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Reference:
        """Inverse of `to_json`."""
        return cls(
            id=str(row["id"]),
            question=row["question"],
            golden_answers=tuple(row["golden_answers"]),
            hops=int(row["hops"]),
            segments=tuple({"role": s["role"], "text": s["text"]} for s in row["segments"]),
            answer=row.get("answer", ""),
            em=float(row.get("em", 0.0)),
        )


@dataclass
class _State:
    question: Question
    relations: list[Relation]
    mention: str
    thought: str
    segments: list[dict[str, str]] = field(default_factory=list)
    answer: str | None = None


def _capitalise(text: str) -> str:
    return text[0].upper() + text[1:]


def _goal(rel: Relation, mention: str) -> str:
    return rel.phrases[0].format(x=mention)


def _plan(relations: Sequence[Relation], first: bool) -> str:
    """The steps still to take, as their search keywords ("Plan: a, b." / "Steps left: b.")."""
    keywords = ", ".join(r.keyword for r in relations)
    if first:
        return f"Plan: {keywords}."
    return f"Steps left: {keywords}." if relations else "No steps left."


def read_fact(hits: Sequence[Hit], mention: str, rel: Relation) -> str | None:
    """The object of `rel` for the entity `mention` names, read from the retrieved passages
    titled as that entity (passages of namesakes and other entities are ignored)."""
    title = title_of_mention(mention)
    for hit in hits:
        if hit.document.title.strip('"') == title:
            value = parse_fact(rel.name, hit.document.text)
            if value is not None:
                return value
    return None


def _advance(state: _State, step: int, hits: Sequence[Hit]) -> None:
    rel = state.relations[step]
    state.segments.append(
        {"role": "env", "text": format_information([h.document.contents for h in hits])}
    )
    value = read_fact(hits, state.mention, rel)
    if value is None:
        state.thought = f"The results do not give {_goal(rel, state.mention)}."
        state.answer = UNKNOWN
        return
    fact = _capitalise(rel.sentences[0].format(s=state.mention, o=value))
    left = state.relations[step + 1 :]
    if not left:
        state.thought = f"{fact} {_plan(left, first=False)}"
        state.answer = name_of_mention(value) if rel.links else value
        return
    state.mention = value
    state.thought = f"{fact} {_plan(left, first=False)} Now I need {_goal(left[0], value)}."


def _finish(state: _State) -> Reference:
    answer = state.answer or UNKNOWN
    state.segments.append(
        {"role": "policy", "text": f"<think> {state.thought} </think>\n<answer> {answer} </answer>"}
    )
    q = state.question
    return Reference(
        id=q.uid.partition(":")[2] or q.uid,
        question=q.question,
        golden_answers=q.golden_answers,
        hops=q.hops or len(state.relations),
        segments=tuple(state.segments),
        answer=answer,
        em=exact_match(answer, q.golden_answers),
    )


def solve(questions: Sequence[Question], retriever: Retriever, k: int) -> list[Reference]:
    """Reference trajectories for world questions (their metadata names the start entity and
    the relations); all questions at the same hop are searched in one batched call."""
    states = []
    for q in questions:
        rels = [relation(name) for name in q.metadata["relations"]]
        start = q.metadata["start"]
        thought = f"{_plan(rels, first=True)} I need to find {_goal(rels[0], start)}."
        states.append(_State(q, rels, start, thought))
    active = list(states)
    step = 0
    while active:
        queries = [query_of_mention(s.mention, s.relations[step].keyword) for s in active]
        for state, query in zip(active, queries, strict=True):
            state.segments.append(
                {
                    "role": "policy",
                    "text": f"<think> {state.thought} </think>\n<search> {query} </search>",
                }
            )
        for state, hits in zip(active, retriever.search(queries, k), strict=True):
            _advance(state, step, hits)
        step += 1
        active = [s for s in active if s.answer is None]
    return [_finish(s) for s in states]


def write_references(references: Sequence[Reference], path: str | Path) -> None:
    """One JSON object per line."""
    with Path(path).open("w", encoding="utf-8") as f:
        for ref in references:
            f.write(json.dumps(ref.to_json(), ensure_ascii=False) + "\n")


def load_references(path: str | Path) -> list[Reference]:
    """Read a `references_<split>.jsonl` file written by `write_world`."""
    refs = []
    with Path(path).open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                refs.append(Reference.from_json(json.loads(line)))
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}: line {line_no}: not a reference row ({err})") from err
    return refs
