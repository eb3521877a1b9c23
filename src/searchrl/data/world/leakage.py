"""How much of what a held-out question needs did training state? A world reference states
each hop's fact in its thoughts ("The founder of X is Y."), and those thoughts are trained
tokens, so a model warm-started on them may answer a held-out question from memory instead of
by searching. This counts, per held-out question, the hop facts (entity, relation) that some
training question also chains. Worlds generated with `held_out_facts: disjoint` give 0 by
construction; `shared` worlds (and real data) are measured."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from searchrl.types import Question


def question_facts(question: Question) -> list[tuple[str, str]]:
    """(entity title, relation) of each hop of a world question (from its metadata)."""
    path, relations = question.metadata["path"], question.metadata["relations"]
    return list(zip(path, relations, strict=False))


def leakage(held_out: Sequence[Question], trained: Iterable[Question]) -> dict[str, float]:
    """Shares of held-out questions with every hop fact / at least one hop fact chained by a
    `trained` question, and the share of all held-out hop facts that are."""
    stated = {fact for q in trained for fact in question_facts(q)}
    every = some = facts = total = 0
    for q in held_out:
        hops = question_facts(q)
        known = sum(f in stated for f in hops)
        every += known == len(hops)
        some += known > 0
        facts, total = facts + known, total + len(hops)
    n = max(len(held_out), 1)
    return {
        "questions_all_hops_stated": every / n,
        "questions_any_hop_stated": some / n,
        "hop_facts_stated": facts / max(total, 1),
        "questions": float(len(held_out)),
    }
