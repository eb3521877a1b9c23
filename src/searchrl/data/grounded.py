"""Reference trajectories for real questions, grounded in what the search engine returns.

Real questions have no scripted solver (the world's `solver` knows each question's chain of
relations). What can be checked is whether the search engine finds the answer: search the
question, and when a gold answer stands in one of the top-k passages, write the transcript a
searcher would have written. Where the first search misses, an entity the first passages
name (a title, or a capitalised name in their text) is searched next, and the transcript is
kept when that second search finds a gold answer: HotpotQA's bridge questions ("the director
of film X was born where?") are solved this way when X's passage names the director.

Every step is something a small model can copy from what it sees: the question as the first
query, the bridge entity from the passages, the sentence holding the answer quoted, then the
answer as the passage writes it. Answers that a passage cannot ground are skipped: yes/no
(comparison questions), and answers the question itself contains ("which is older, A or B?").

`answer_recall` is the ceiling of any method that reads the top-k passages of the question:
the share of questions with a gold answer in them (normalized, whole words).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from searchrl.config.data import GroundingConfig
from searchrl.data.comparison import compared_entities, compares, comparison_reference
from searchrl.data.templates import INFORMATION_CLOSE, format_information
from searchrl.data.world.solver import Reference
from searchrl.retrieval.base import Retriever
from searchrl.reward.metrics import normalize_answer
from searchrl.types import Hit, Question
from searchrl.utils.progress import progress_bar

SEARCH_BATCH = 256
"""Queries sent to the retriever at once (and the progress bar's step)."""
UNGROUNDABLE = frozenset({"yes", "no"})
FIRST_THOUGHT = "I need to search for the answer."
_NAME = re.compile(r"[A-Z][\w'’.&-]*(?:\s+(?:of|the|de|von|van|and|[A-Z][\w'’.&-]*))*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DOC = re.compile(r"Doc (\d+)\(Title: ")


@dataclass(frozen=True)
class Evidence:
    """Where a gold answer stands: the passage's rank (1-based) and the answer's surface."""

    doc: int
    surface: str
    quote: str


def _contains(haystack: str, needle: str) -> bool:
    """Whole-word containment of normalized texts."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def answer_recall(hits: Sequence[Hit], golden_answers: Sequence[str]) -> bool:
    """A gold answer occurs, normalized and as whole words, in one of the passages (DPR's
    "has answer", the ceiling of reading these passages)."""
    texts = [normalize_answer(h.document.contents) for h in hits]
    golds = [normalize_answer(g) for g in golden_answers]
    return any(_contains(t, g) for t in texts for g in golds)


def groundable(question: Question) -> list[str]:
    """The gold answers a passage can ground: not yes/no, not already in the question."""
    asked = normalize_answer(question.question)
    keep = []
    for gold in question.golden_answers:
        norm = normalize_answer(gold)
        if norm and norm not in UNGROUNDABLE and not _contains(asked, norm):
            keep.append(gold)
    return keep


def _quote(text: str, start: int, end: int, words: int) -> str:
    """The sentence around text[start:end], cut to about `words` words around the answer (the
    passage's characters as they are)."""
    sentences = [m.end() for m in _SENTENCE_END.finditer(text)]
    begin = max([0, *[s for s in sentences if s <= start]])
    stop = min([len(text), *[s for s in sentences if s > end]])
    before = [m.start() for m in re.finditer(r"\S+", text[begin:start])][-(words // 2) :]
    after = [m.end() for m in re.finditer(r"\S+", text[end:stop])]
    left = begin + before[0] if before else start
    room = max(words - len(before) - 1, 0)
    right = end + after[min(room, len(after)) - 1] if after and room else end
    return text[left:right].strip()


def _split_doc(line: str) -> tuple[str, str]:
    """`Doc i(Title: "T") text` → (T, text)."""
    head = line.find('") ')
    cut = head + 3 if head >= 0 else line.find(") ") + 2 if ") " in line else len(line)
    title = line[: max(cut - 2, 0)].split("(Title: ", 1)[-1].strip().strip('"')
    return title, line[cut:].rstrip()


def _about(title: str, entity: str) -> bool:
    """The passage is the entity's own (its title names the entity, or the other way round)."""
    title, entity = normalize_answer(title), normalize_answer(entity)
    return _contains(title, entity) or _contains(entity, title)


def find_evidence(
    observation: str, golds: Sequence[str], quote_words: int, about: str | None = None
) -> Evidence | None:
    """The first gold answer standing, as whole words matched case-insensitively, in the
    observation the model is shown (an `<information>` block, cut as the rollout cuts it), in
    the passage ranked highest: the answer keeps the passage's spelling, so it is what a model
    copies, and its passage is the `Doc i` line it sits in (text before title). With `about`
    (a bridge search), only passages of that entity count: a common answer ("American") in
    some other passage the entity's search returned is chance, not a second hop."""
    patterns = [re.compile(rf"(?<!\w){re.escape(g.strip())}(?!\w)", re.IGNORECASE) for g in golds]
    starts = [(m.start(), int(m.group(1))) for m in _DOC.finditer(observation)]
    for n, (begin, rank) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(observation)
        title, text = _split_doc(observation[begin:end].removesuffix(INFORMATION_CLOSE))
        if about is not None and not _about(title, about):
            continue
        for part in (text, title):
            for pattern in patterns:
                match = pattern.search(part)
                if match:
                    quote = _quote(part, match.start(), match.end(), quote_words)
                    return Evidence(rank, match.group(0), quote)
    return None


def bridge_entities(question: str, observation: str, limit: int) -> list[tuple[int, str]]:
    """Entities the shown passages name that the question does not: titles first, then
    capitalised names in the texts, each with the rank of the passage it came from."""
    asked = normalize_answer(question)
    starts = [(m.start(), int(m.group(1))) for m in _DOC.finditer(observation)]
    docs = []
    for n, (begin, rank) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(observation)
        docs.append((rank, *_split_doc(observation[begin:end].removesuffix(INFORMATION_CLOSE))))
    titles = [(rank, title) for rank, title, _ in docs]
    names = [(rank, m.group(0)) for rank, _, text in docs for m in _NAME.finditer(text)]
    seen: set[str] = set()
    found: list[tuple[int, str]] = []
    for rank, name in [*titles, *names]:
        norm = normalize_answer(name)
        if len(norm) < 3 or norm in seen or _contains(asked, norm):
            continue
        seen.add(norm)
        found.append((rank, name.strip().rstrip(".'’&-")))
        if len(found) == limit:
            break
    return found


def _search(
    retriever: Retriever, queries: Sequence[str], k: int, advance: Callable[[int], None]
) -> list[list[Hit]]:
    """Every query's top `k`, searched `SEARCH_BATCH` at a time."""
    results: list[list[Hit]] = []
    for i in range(0, len(queries), SEARCH_BATCH):
        chunk = list(queries[i : i + SEARCH_BATCH])
        results.extend(hits[:k] for hits in retriever.search(chunk, k))
        advance(len(chunk))
    return results


def _policy(thought: str, action: str) -> dict[str, str]:
    return {"role": "policy", "text": f"<think> {thought} </think>\n{action}"}


def _env(hits: Sequence[Hit]) -> dict[str, str]:
    return {"role": "env", "text": format_information([h.document.contents for h in hits])}


def _reference(
    question: Question, steps: Sequence[tuple[str, str, list[Hit]]], found: Evidence
) -> Reference:
    """`steps` = (thought before the search, query, hits) chain; the last thought quotes."""
    segments: list[dict[str, str]] = []
    for thought, query, hits in steps:
        segments += [_policy(thought, f"<search> {query} </search>"), _env(hits)]
    answer = f"<answer> {found.surface} </answer>"
    segments.append(_policy(f'Doc {found.doc} says: "{found.quote}"', answer))
    return Reference(
        id=question.uid,
        question=question.question,
        golden_answers=question.golden_answers,
        hops=len(steps),
        segments=tuple(segments),
        answer=found.surface,
        em=1.0,
    )


def ground_references(
    questions: Sequence[Question],
    retriever: Retriever,
    topk: int,
    config: GroundingConfig,
    *,
    visible: Callable[[str], str] | None = None,
    progress: bool = True,
) -> list[Reference]:
    """A reference for every question whose answer the search engine finds (one search, or a
    bridge search when `config.bridge`); the others are left out. `visible` maps an
    `<information>` block to what the policy is shown of it (the rollout's token budget): an
    answer cut off there does not count. Order follows `questions`."""
    if config.max_questions:
        questions = questions[: config.max_questions]
    view = visible or (lambda text: text)

    def shown(hits: Sequence[Hit]) -> str:
        return view(format_information([h.document.contents for h in hits]))

    pairs = {}
    if config.comparisons:
        pairs = {i: compared_entities(q.question) for i, q in enumerate(questions) if compares(q)}
    queries = [q.question.strip() for q in questions]
    with progress_bar("grounding: first search", len(queries), enabled=progress) as advance:
        first = _search(retriever, queries, topk, advance)
    found: dict[int, Reference] = {}
    pending: list[tuple[int, int, str]] = []  # (question index, rank, entity)
    for i, (question, hits) in enumerate(zip(questions, first, strict=True)):
        golds = groundable(question)
        if not golds or i in pairs:
            continue
        observation = shown(hits)
        evidence = find_evidence(observation, golds, config.quote_words)
        if evidence is not None:
            found[i] = _reference(question, [(FIRST_THOUGHT, queries[i], hits)], evidence)
        elif config.bridge:
            for rank, name in bridge_entities(
                question.question, observation, config.bridge_candidates
            ):
                pending.append((i, rank, name))
    if pending:
        names = [name for _, _, name in pending]
        with progress_bar("grounding: bridge search", len(names), enabled=progress) as advance:
            second = _search(retriever, names, topk, advance)
        for (i, rank, name), hits in zip(pending, second, strict=True):
            if i in found:
                continue
            golds = groundable(questions[i])
            evidence = find_evidence(shown(hits), golds, config.quote_words, about=name)
            if evidence is not None:
                thought = f"Doc {rank} mentions {name}. I need to search for {name}."
                steps = [(FIRST_THOUGHT, queries[i], first[i]), (thought, name, hits)]
                found[i] = _reference(questions[i], steps, evidence)
    both = {i: pair for i, pair in pairs.items() if pair is not None}
    names = [name for pair in both.values() for name in pair]
    with progress_bar("grounding: comparisons", len(names), enabled=progress) as advance:
        results = iter(_search(retriever, names, topk, advance))
    for i, pair in both.items():
        hits = (next(results), next(results))
        made = comparison_reference(questions[i], pair, hits, view, config.quote_words)
        if made is not None:
            found[i] = made
    return [found[i] for i in sorted(found)]
