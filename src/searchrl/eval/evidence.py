"""What an evaluated question showed its policy, and why it was lost: the evidence an archived
row keeps so a failure can be read per question without the trajectory.

A row's evidence is its queries, the passages the policy was *shown* (an observation is cut to
`rollout.max_obs_tokens` tokens, so a third passage may never reach the policy although it was
retrieved) and whether a gold answer stood, normalized and as whole words, in what was shown
(`gold_shown`). The failure table sorts every wrong answer into one cause, first match wins:

| cause         | the question was lost because                                              |
|---------------|----------------------------------------------------------------------------|
| `no_answer`   | the trajectory ended without an answer                                     |
| `comparison`  | a yes/no or "A or B" question (the gold is yes/no or in the question)      |
| `shown_wrong` | the gold was in the passages shown, and the policy answered something else |
| `never_shown` | no passage shown held the gold (search or coverage, not reading)           |
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from searchrl.data.comparison import is_comparison
from searchrl.data.templates import INFORMATION_OPEN
from searchrl.eval.summary import set_order
from searchrl.reward.metrics import normalize_answer
from searchrl.types import Trajectory

CAUSES = ("no_answer", "comparison", "shown_wrong", "never_shown")
"""Why a wrong answer was wrong, in the order the first matching cause is taken."""
_DOC = re.compile(r"Doc \d+\(Title: ")


def holds_answer(text: str, golden_answers: Sequence[str]) -> bool:
    """A gold answer stands in `text`, both normalized, as whole words (DPR's "has answer")."""
    haystack = f" {normalize_answer(text)} "
    return any(
        norm and f" {norm} " in haystack for norm in (normalize_answer(g) for g in golden_answers)
    )


def _observations(traj: Trajectory) -> list[str]:
    """The `<information>` blocks as inserted (cut to the budget), in order."""
    env = (s.text for s in traj.segments if s.role == "env")
    return [text for text in env if text.startswith(INFORMATION_OPEN)]


def shown_passages(traj: Trajectory, documents: Mapping[str, str]) -> tuple[list[str], str]:
    """(ids of the passages the policy was shown, in order; the text it read of them). A search
    pairs with the observation inserted after it: the passages whose `Doc i` line begins
    inside the cut block count as shown. A search without an observation (the RAG baselines
    put the passages in the prompt) shows a passage when its text stands in the prompt."""
    observations = _observations(traj)
    ids: list[str] = []
    texts: list[str] = []
    for i, call in enumerate(traj.searches):
        if i < len(observations):
            count = len(_DOC.findall(observations[i]))
            ids += call.doc_ids[:count]
            texts.append(observations[i])
            continue
        for doc in call.doc_ids:
            body = documents.get(doc, "").partition("\n")[2].strip()
            if body and body in traj.prompt:
                ids.append(doc)
                texts.append(documents[doc])
    return ids, "\n".join(texts)


def row_evidence(traj: Trajectory, documents: Mapping[str, str]) -> dict[str, Any]:
    """The evidence fields of one `samples.jsonl` row."""
    shown, text = shown_passages(traj, documents)
    return {
        "queries": [call.query for call in traj.searches],
        "shown": shown,
        "gold_shown": holds_answer(text, traj.golden_answers),
    }


def cause(row: Mapping[str, Any]) -> str | None:
    """Why a row's answer is wrong (one of CAUSES); None when it is right, and `unknown` for a
    row written before evaluations kept `gold_shown`."""
    if float(row.get("em") or 0.0) >= 1.0:
        return None
    if not (row.get("prediction") or "").strip():
        return "no_answer"
    if is_comparison(row.get("question") or "", row.get("golden_answers") or []):
        return "comparison"
    if "gold_shown" not in row:
        return "unknown"
    return "shown_wrong" if row["gold_shown"] else "never_shown"


def failure_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per set and over all rows: questions, right answers, and wrong ones by cause; plus how
    many questions are comparisons and how many of those were answered right."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        why = cause(row)
        comparison = is_comparison(row.get("question") or "", row.get("golden_answers") or [])
        for key in (row["set"], "all"):
            counts = table[key]
            counts["n"] += 1
            counts["right" if why is None else why] += 1
            counts["comparisons"] += int(comparison)
            counts["comparisons_right"] += int(comparison and why is None)
            counts["gold_shown"] += int(bool(row.get("gold_shown")))
    columns = ("n", "right", *CAUSES, "unknown", "comparisons", "comparisons_right", "gold_shown")
    names = sorted((k for k in table if k != "all"), key=set_order) + ["all"] * bool(rows)
    return {name: {c: table[name][c] for c in columns} for name in names}
