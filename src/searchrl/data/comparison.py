"""Reference transcripts for comparison questions: search A, search B, answer.

HotpotQA's and 2WikiMultihopQA's comparison questions ("Were Scott Derrickson and Ed Wood of
the same nationality?", "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?")
name both entities; their answer is yes/no, one of the two, or what they share. One search with
the question rarely shows both entities' passages, and grounding (`data.grounded`) skips them
(the answer is not in a passage), so a warm start without these never saw one.

The transcript a small model can copy: the first entity the question names as the first query,
the first sentence of its passage quoted, the second entity as the second query, its sentence
quoted, then the gold answer (yes/no, the option as a passage or the question spells it, or a
shared property a passage states). Where a search shows no passage about its entity (the
shared corpus holds few of them), the transcript says so and still answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from searchrl.data.templates import format_information
from searchrl.data.world.solver import Reference
from searchrl.reward.metrics import normalize_answer
from searchrl.types import Hit, Question

_QUOTED = re.compile(r'["“]([^"”]{2,80})["”]')
_LEADING = re.compile(
    r"^(?:(?:are|were|is|was|do|did|does|have|has|which|who|what|both)\s+)+",
    re.IGNORECASE,
)
_WORD = r"[A-Z0-9][^\s,?:]*"
_JOIN = r"(?:\s+(?:(?:of|the|de|von|van|du|la|and)\s+)*" + _WORD + ")*"
_NAME_AT_END = re.compile(_WORD + _JOIN + "$")
_NAME_AT_START = re.compile("^" + _WORD + _JOIN)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_ABBREVIATION = re.compile(r"(?:^|\s|\.)(?:[A-Z][a-z]?|[a-z]|Jr|Sr|St|Mt|Dr|Mr|Mrs|Ms|No|vs)\.$")
YES_NO = frozenset({"yes", "no"})


def is_comparison(question: str, golden_answers: Sequence[str]) -> bool:
    """A yes/no or "A or B" question: a gold is yes/no or already stands in the question."""
    golds = [normalize_answer(g) for g in golden_answers]
    asked = f" {normalize_answer(question)} "
    return any(g in YES_NO or (g and f" {g} " in asked) for g in golds)


def compares(question: Question) -> bool:
    """A question to answer by searching both entities it names: its file says it is a
    comparison (HotpotQA's `type`), or its answer is yes/no or stands in the question."""
    kind = question.metadata.get("type") if question.metadata else None
    return kind == "comparison" or is_comparison(question.question, question.golden_answers)


def _clean(name: str) -> str:
    """An entity as a query: leading question words and articles dropped, edges trimmed."""
    return _LEADING.sub("", name.strip().strip("\"'“”,.")).strip().rstrip("?!.,")


def compared_entities(question: str) -> tuple[str, str] | None:
    """The two entities a comparison question names, in order, or None: two quoted names; the
    `A or B` of its last clause holding " or "; else the names on both sides of " and "."""
    quoted = _QUOTED.findall(question)
    if len(quoted) >= 2:
        return _clean(quoted[0]), _clean(quoted[1])
    text = question.strip().rstrip("?").strip()
    clauses = [c for c in re.split(r"[,:]", text) if " or " in c]
    if clauses:
        left, right = clauses[-1].rsplit(" or ", 1)
        a = _NAME_AT_END.search(left.strip())
        b = _NAME_AT_START.search(_LEADING.sub("", right.strip()))
        pair = (_clean(a.group(0)) if a else "", _clean(b.group(0)) if b else "")
    elif " and " in text:
        left, right = text.split(" and ", 1)
        a = _NAME_AT_END.search(left.strip())
        b = _NAME_AT_START.search(right.strip())
        pair = (_clean(a.group(0)) if a else "", _clean(b.group(0)) if b else "")
    else:
        return None
    if all(len(p) >= 2 for p in pair) and normalize_answer(pair[0]) != normalize_answer(pair[1]):
        return pair
    return None


def _lead(text: str, words: int) -> str:
    """The passage's first sentence (not cut after an abbreviation or initial: "Jr.",
    "St.", "J."), cut to `words` words."""
    text = text.strip()
    for end in _SENTENCE.finditer(text):
        head = text[: end.start()]
        if not _ABBREVIATION.search(head):
            text = head
            break
    return " ".join(text.split()[:words])


def _passage_about(hits: Sequence[Hit], entity: str) -> tuple[int, str] | None:
    """(rank, text) of the first passage whose title names `entity` (or is named by it)."""
    norm = f" {normalize_answer(entity)} "
    for rank, hit in enumerate(hits, start=1):
        title, _, text = hit.document.contents.partition("\n")
        t = f" {normalize_answer(title.strip().strip(chr(34)))} "
        if t.strip() and (t in norm or norm in t):
            return rank, text
    return None


def comparison_answer(
    question: Question, shown: Sequence[str], golds: Sequence[str] | None = None
) -> str | None:
    """What the reference answers: yes/no as the gold says; else a gold as the question or a
    shown passage spells it (an option, or the property both share); None when neither
    holds one."""
    golds = list(golds or question.golden_answers)
    for gold in golds:
        if normalize_answer(gold) in YES_NO:
            return normalize_answer(gold)
    for text in (question.question, *shown):
        for gold in golds:
            match = re.search(rf"(?<!\w){re.escape(gold.strip())}(?!\w)", text, re.IGNORECASE)
            if gold.strip() and match:
                return match.group(0)
    return None


def _reading(hits: Sequence[Hit], entity: str, observation: str, words: int) -> str:
    """What the policy reads about `entity`: the first sentence of its passage (quoted) when
    one was shown, else that none mentions it."""
    about = _passage_about(hits, entity)
    if about is None or _lead(about[1], 6) not in observation:
        return f"The passages do not mention {entity}."
    return f'Doc {about[0]} says: "{_lead(about[1], words)}"'


def comparison_reference(
    question: Question,
    entities: tuple[str, str],
    hits: tuple[Sequence[Hit], Sequence[Hit]],
    view: Callable[[str], str],
    quote_words: int,
) -> Reference | None:
    """search A → read A's passage → search B → read B's → answer; None when no answer can
    be written (neither yes/no nor a gold the question or a shown passage spells). The
    corpus often lacks one entity's passage; the transcript then says so, and its answer is
    what the data teaches for such a question (the prior of a yes/no or an "A or B")."""
    shown = [view(format_information([h.document.contents for h in found])) for found in hits]
    answer = comparison_answer(question, shown)
    if answer is None:
        return None
    a, b = entities
    read_a, read_b = (
        _reading(found, entity, text, quote_words)
        for found, entity, text in zip(hits, entities, shown, strict=True)
    )
    segments = (
        _policy(f"The question compares {a} and {b}. I need to search for {a}.", a),
        {"role": "env", "text": format_information([h.document.contents for h in hits[0]])},
        _policy(f"{read_a} I need to search for {b}.", b),
        {"role": "env", "text": format_information([h.document.contents for h in hits[1]])},
        {"role": "policy", "text": f"<think> {read_b} </think>\n<answer> {answer} </answer>"},
    )
    return Reference(
        id=question.uid,
        question=question.question,
        golden_answers=question.golden_answers,
        hops=2,
        segments=segments,
        answer=answer,
        em=1.0,
    )


def _policy(thought: str, query: str) -> dict[str, str]:
    return {"role": "policy", "text": f"<think> {thought} </think>\n<search> {query} </search>"}
