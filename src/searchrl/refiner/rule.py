"""Rules that read no model and no gold answer, so they are fair at evaluation too (not in
the paper): the rule baseline of the discriminator (`refiner.discriminator: rule`), what a
refiner that reads nothing would revise, and the checks of the checked trimmer
(`refiner.trimmer: checked`), the earliest step a transcript itself shows wrong."""

from __future__ import annotations

import re

from searchrl.refiner.steps import split_steps
from searchrl.reward.metrics import normalize_answer
from searchrl.rollout.parse import parse_action
from searchrl.types import Trajectory

PLAN = re.compile(r"Plan:([^.<]*)\.")
"""The plan the world's references open with ("Plan: employer, country.", one search keyword
per hop, `data.world.solver`); an Actor warm-started on them writes one too."""


def rule_revise(traj: Trajectory) -> bool:
    """The rule-based discriminator: no answer, or a search that returned no passage or only
    passages an earlier search of the trajectory had already returned."""
    if traj.answer is None:
        return True
    seen: set[str] = set()
    for call in traj.searches:
        new = set(call.doc_ids) - seen
        if not new:
            return True
        seen |= new
    return False


def planned_hops(text: str) -> int | None:
    """How many searches the plan in `text` (the first thought) names; None without a plan."""
    plan = PLAN.search(text)
    return None if plan is None else len([p for p in plan.group(1).split(",") if p.strip()])


def checked_step(traj: Trajectory) -> int:
    """The earliest step (1-based) a check of the transcript shows wrong, 0 when none does:
    an invalid action; a search that repeats an earlier query, or that returns no passage an
    earlier search had not; a search beyond the plan the Actor wrote in its first thought (no
    plan, no such check); an answer that is in neither the question nor a passage retrieved
    before it (both normalised as EM normalises them).

    Why: π_h named the oracle's flawed step of the tour's Actors' own rollouts 0.45–0.58 of
    the time, about as often as the best constant step; checks first, then π_h, 0.52–0.73
    (docs/search_r2.md, "A trimmer that checks first"). A check fires on about half of the
    flawed transcripts and on 0–0.5 % of the clean ones."""
    steps = split_steps(traj.segments)
    calls = {call.turn: call for call in traj.searches}
    budget = planned_hops(steps[0].policy.text) if steps else None
    queries: set[str] = set()
    passages: set[str] = set()
    context = normalize_answer(traj.question)
    for k, step in enumerate(steps, start=1):  # every step before k searched: k is a count
        action = parse_action(step.policy.text)
        if action.kind == "answer":
            return 0 if normalize_answer(action.content) in context else k
        if action.kind != "search":
            return k
        query = " ".join(action.content.lower().split())
        found = set(calls[k].doc_ids) if k in calls else set()
        if query in queries or not found - passages or (budget is not None and k > budget):
            return k
        queries.add(query)
        passages |= found
        context += " " + normalize_answer("".join(e.text for e in step.env))
    return 0
