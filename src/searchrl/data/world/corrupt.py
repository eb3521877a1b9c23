"""Reference trajectories corrupted at a known step: labelled data for the Meta-Refiner.

The world knows what a correct transcript looks like (the scripted solver's), so a flaw put in
at step k makes k the earliest flawed step, and a clean reference is label 0. Three flaws, the
ones the paper's Figure 1 describes (a wrong entity retrieved, evidence misread) and the ones a
small model makes itself:

- `wrong_query` (a search step k): the thought names the right entity, the query another one;
- `misread` (a search step k ≥ 2): the thought states the previous step's fact with another
  entity than the passage gave, and searches that entity;
- `misread_answer` (the answer step T): the passages were right, the answer states another
  value than the one they gave.

After a wrong entity the transcript goes on as the scripted solver would from that entity
(real searches, its own templates), to the end of the question's chain and a wrong answer. So
nothing marks a flawed transcript but the flaw itself: it is written in the same words as the
clean ones, it is as long as they are, and the flaw sits at any step. The entity or value put
in is one the relation can take (another question's), preferably one the preceding passages
name, as a reader who confuses two names would. A search flaw is kept only if its search
misses every passage of the hop it needed, so the label is also the world oracle's.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from searchrl.data.world.schema import (
    mention_of_title,
    name_of_mention,
    parse_fact,
    query_of_mention,
    relation,
)
from searchrl.data.world.solver import UNKNOWN, Reference, solve
from searchrl.retrieval.base import Retriever
from searchrl.reward.metrics import exact_match
from searchrl.types import Question

Flaw = Literal["wrong_query", "misread", "misread_answer"]
_SEARCH = re.compile(r"<search>\s*(.*?)\s*</search>", re.DOTALL)
_TRIES = 6


def policy_steps(reference: Reference) -> list[int]:
    """Segment indices of the policy turns (step i is `policy_steps(...)[i - 1]`)."""
    return [i for i, s in enumerate(reference.segments) if s["role"] == "policy"]


@dataclass
class Confusions:
    """What each relation's subject and object can be, from a split's questions: the entities
    and values a flaw may put in place of the right ones."""

    subjects: dict[str, list[str]] = field(default_factory=dict)
    """Relation → mentions of entities that have it (each is some chain's hop subject)."""
    objects: dict[str, list[str]] = field(default_factory=dict)
    """Relation → mentions or values it points to in some chain."""

    @classmethod
    def of(cls, questions: Sequence[Question]) -> Confusions:
        """Read from world questions' metadata (their chains' relations and entity titles)."""
        out = cls()
        for q in questions:
            rels = list(q.metadata.get("relations") or [])
            path = [mention_of_title(t) for t in q.metadata.get("path") or []]
            for j, name in enumerate(rels):
                if j < len(path):
                    out.subjects.setdefault(name, []).append(path[j])
                target = path[j + 1] if j + 1 < len(path) else q.golden_answers[0]
                out.objects.setdefault(name, []).append(target)
        for table in (out.subjects, out.objects):
            for name in table:
                table[name] = sorted(set(table[name]))
        return out


def _pick(options: Sequence[str], avoid: set[str], context: str, rng: random.Random) -> list[str]:
    """Candidates in the order to try: those `context` names first (a plausible confusion),
    then the rest, each group shuffled; `avoid` left out."""
    usable = [o for o in options if o not in avoid]
    named = [o for o in usable if name_of_mention(o) in context]
    rest = [o for o in usable if name_of_mention(o) not in context]
    rng.shuffle(named)
    rng.shuffle(rest)
    return named + rest


def _query(text: str) -> str:
    match = _SEARCH.search(text)
    return match.group(1) if match else ""


class Corrupter:
    """Flawed copies of one split's solved references (see the module docstring)."""

    def __init__(self, questions: Sequence[Question], retriever: Retriever, k: int = 3) -> None:
        self.questions = {q.uid.partition(":")[2] or q.uid: q for q in questions}
        self.confusions = Confusions.of(questions)
        self.retriever, self.k = retriever, k

    def corrupt(
        self, reference: Reference, rng: random.Random, step: int | None = None
    ) -> tuple[Reference, int] | None:
        """A flawed copy of a solved reference and its earliest flawed step (`step`, or one
        drawn uniformly from 1..T), or None when no flaw of that step could be made."""
        question = self.questions.get(reference.id)
        steps = policy_steps(reference)
        if question is None or not question.metadata.get("relations"):
            return None
        k = step if step is not None else rng.randint(1, len(steps))
        if k == len(steps):
            flawed = self._misread_answer(reference, question, rng)
        else:
            flaw: Flaw = "wrong_query" if k == 1 or rng.random() < 0.5 else "misread"
            flawed = self._wrong_entity(reference, question, k, flaw, rng)
        return None if flawed is None else (flawed, k)

    def _chain(self, question: Question) -> tuple[list[str], list[str]]:
        rels = list(question.metadata["relations"])
        path = [mention_of_title(t) for t in question.metadata.get("path") or []]
        return rels, path

    def _wrong_entity(
        self, reference: Reference, question: Question, k: int, flaw: Flaw, rng: random.Random
    ) -> Reference | None:
        """Step k searches another entity than hop k needs; the solver goes on from it."""
        rels, path = self._chain(question)
        steps = policy_steps(reference)
        if k > len(rels) or k > len(path):
            return None
        right, rel = path[k - 1], relation(rels[k - 1])
        text = reference.segments[steps[k - 1]]["text"]
        seen = "".join(s["text"] for s in reference.segments[: steps[k - 1]])
        support = set(question.metadata["support"][k - 1])
        avoid = {right, *path}
        for other in _pick(self.confusions.subjects.get(rel.name, []), avoid, seen, rng)[:_TRIES]:
            query = query_of_mention(other, rel.keyword)
            (hits,) = self.retriever.search([query], self.k)
            if support & {h.document.id for h in hits}:
                continue  # the search would still find the hop: not a flaw
            rest = self._solve_from(question, other, rels[k - 1 :])
            if rest is None or exact_match(rest.answer, question.golden_answers) > 0:
                continue
            new = text.replace(f"<search> {_query(text)} </search>", f"<search> {query} </search>")
            if flaw == "misread":  # the thought itself takes `other` for the entity read
                new = new.replace(right, other)
            segments = (
                *reference.segments[: steps[k - 1]],
                {"role": "policy", "text": new},
                *rest.segments[1:],
            )
            return replace(reference, segments=segments, answer=rest.answer, em=0.0)
        return None

    def _solve_from(self, question: Question, start: str, rels: list[str]) -> Reference | None:
        """The solver's transcript from entity `start` over the remaining relations, or None
        when it cannot finish (its "the results do not give" is not a template clean
        transcripts use)."""
        pseudo = Question(
            uid=question.uid,
            question=question.question,
            golden_answers=question.golden_answers,
            metadata={"start": start, "relations": rels},
        )
        (rest,) = solve([pseudo], self.retriever, self.k)
        return None if rest.answer == UNKNOWN else rest

    def _misread_answer(
        self, reference: Reference, question: Question, rng: random.Random
    ) -> Reference | None:
        """The answer step states another value than the retrieved passage gave."""
        rels, _ = self._chain(question)
        rel = relation(rels[-1])
        steps = policy_steps(reference)
        text = reference.segments[steps[-1]]["text"]
        read = parse_fact(rel.name, text.partition("</think>")[0].replace("<think>", "").strip())
        if read is None:
            return None
        seen = "".join(s["text"] for s in reference.segments[: steps[-1]])
        options = self.confusions.objects.get(rel.name, [])
        for other in _pick(options, {read, reference.answer}, seen, rng)[:_TRIES]:
            answer = name_of_mention(other) if rel.links else other
            if exact_match(answer, question.golden_answers) > 0:
                continue
            think, _, _ = text.partition("</think>")
            new = f"{think.replace(read, other)}</think>\n<answer> {answer} </answer>"
            segments = (*reference.segments[: steps[-1]], {"role": "policy", "text": new})
            return replace(reference, segments=segments, answer=answer, em=0.0)
        return None
