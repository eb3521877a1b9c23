"""Trajectory quality of two methods on the same questions (seed 001 §5.6): six rubric
dimensions, each scored 0/1/2 per trajectory, then counted as wins, losses AND ties of A
(Search-R2's Figure 4 leaves ties out, which inflates the win ratios).

Each trajectory is scored on its own (`RubricConfig.shown = "single"`, the default): the judge
reads one trajectory per request, so neither method's text, length or position can colour the
other's scores. The paper says each trajectory "is scored independently" (§5.6); its analysis
(seed 001 "Critical Assessment") reads the judge as seeing both at once, which `shown = "pair"`
reproduces: both in one prompt, which one is shown first decided by a seeded coin and the
scores mapped back, so a position bias cannot favour one method.
- `RuleJudge` scores the dimensions a rule can: evidence groundedness (is the answer in the
  retrieved text?) and non-redundancy (repeated queries or already-seen documents).
- `LLMJudge` asks an OpenAI-compatible endpoint for all six (the paper used GPT-5.1).
- `HybridJudge` takes the rule's scores where it has them and the endpoint's for the rest.
A dimension no judge scored is counted as `unscored`, never as a tie.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from searchrl.config.eval import RubricConfig
from searchrl.eval.compare import load_rows, paired_rows
from searchrl.eval.summary import set_order
from searchrl.reward.metrics import normalize_answer
from searchrl.utils.chat_client import ChatClient, JudgeError

DIMENSIONS = (
    "evidence_groundedness",
    "information_density",
    "non_redundancy",
    "query_timing",
    "coherence",
    "uncertainty_handling",
)

DESCRIPTIONS = {
    "evidence_groundedness": "the final answer and claims are supported by retrieved evidence",
    "information_density": "searches bring back new, relevant information (little noise)",
    "non_redundancy": "no repeated or near-duplicate searches, no re-reading the same facts",
    "query_timing": "searches happen when information is missing, not before or after need",
    "coherence": "reasoning steps follow from each other and from the evidence to the answer",
    "uncertainty_handling": "acknowledges missing or conflicting evidence instead of guessing",
}

Row = dict[str, Any]
Scores = dict[str, int | None]


class Judge(Protocol):
    """Scores one trajectory on its own, or two of one question shown as A then B."""

    def score(self, row: Row) -> Scores: ...

    def score_pair(self, first: Row, second: Row) -> tuple[Scores, Scores]: ...


def _retrieved_text(row: Row) -> str:
    docs = row.get("documents") or {}
    if docs:
        return " ".join(docs.values())
    segments = row.get("trajectory", {}).get("segments", [])
    return " ".join(s["text"] for s in segments if s["role"] == "env")


def groundedness(row: Row) -> int:
    """2: the normalized answer occurs in the retrieved text; 1: at least half its words do;
    0: otherwise, or no answer, or nothing retrieved."""
    prediction = normalize_answer(row.get("prediction") or "")
    evidence = normalize_answer(_retrieved_text(row))
    if not prediction or not evidence:
        return 0
    if re.search(rf"\b{re.escape(prediction)}\b", evidence):
        return 2
    words = prediction.split()
    found = sum(w in set(evidence.split()) for w in words)
    return 1 if 2 * found >= len(words) else 0


def non_redundancy(row: Row) -> int:
    """2: no redundant search (or none at all); 1: at most half redundant; 0: more. A search
    is redundant when its normalized query was asked before or every document it returned
    had been seen already."""
    calls = row.get("trajectory", {}).get("searches", [])
    if not calls:
        return 2
    queries: set[str] = set()
    seen: set[str] = set()
    redundant = 0
    for call in calls:
        query = normalize_answer(call["query"])
        docs = set(call["doc_ids"])
        if query in queries or (docs and docs <= seen):
            redundant += 1
        queries.add(query)
        seen |= docs
    if redundant == 0:
        return 2
    return 1 if 2 * redundant <= len(calls) else 0


_RULES: dict[str, Callable[[Row], int]] = {
    "evidence_groundedness": groundedness,
    "non_redundancy": non_redundancy,
}


class RuleJudge:
    """The rule-scored dimensions; the others stay None."""

    def score_pair(self, first: Row, second: Row) -> tuple[Scores, Scores]:
        return self.score(first), self.score(second)

    def score(self, row: Row) -> Scores:
        return {d: _RULES[d](row) if d in _RULES else None for d in DIMENSIONS}


def render_trajectory(row: Row, max_env_chars: int = 600) -> str:
    """A trajectory as the judge reads it: the model's text in full, each inserted
    observation cut to `max_env_chars`."""
    parts = []
    for segment in row.get("trajectory", {}).get("segments", []):
        text = segment["text"]
        if segment["role"] != "policy" and len(text) > max_env_chars:
            text = text[:max_env_chars] + " …[cut]"
        parts.append(text)
    return "".join(parts).strip() or "(empty)"


def _rubric_text() -> tuple[str, str]:
    rubric = "\n".join(f"- {d}: {DESCRIPTIONS[d]}" for d in DIMENSIONS)
    keys = ", ".join(f'"{d}": 0|1|2' for d in DIMENSIONS)
    return rubric, keys


def judge_prompt_single(row: Row) -> str:
    """The instruction, the question, the gold answers and one trajectory."""
    rubric, keys = _rubric_text()
    return (
        "You assess one search-augmented reasoning trajectory. Score it on every dimension: "
        "0 = poor, 1 = acceptable, 2 = good.\n"
        f"Dimensions:\n{rubric}\n\nQuestion: {row['question']}\n"
        f"Gold answers: {json.dumps(row.get('golden_answers', []))}\n\n"
        f"Trajectory:\n{render_trajectory(row)}\n\n"
        f"Reply with one JSON object only: {{{keys}}}"
    )


def judge_prompt(first: Row, second: Row) -> str:
    """The instruction, the question, the gold answers and both trajectories (`pair`)."""
    rubric, keys = _rubric_text()
    return (
        "You compare two search-augmented reasoning trajectories for the same question. Score "
        "each trajectory independently on every dimension: 0 = poor, 1 = acceptable, 2 = good.\n"
        f"Dimensions:\n{rubric}\n\nQuestion: {first['question']}\n"
        f"Gold answers: {json.dumps(first.get('golden_answers', []))}\n\n"
        f"Trajectory A:\n{render_trajectory(first)}\n\n"
        f"Trajectory B:\n{render_trajectory(second)}\n\n"
        f'Reply with one JSON object only: {{"A": {{{keys}}}, "B": {{{keys}}}}}'
    )


def _objects(text: str) -> Iterator[Any]:
    """Every JSON object that starts somewhere in `text`, in order."""
    start = text.find("{")
    while start != -1:
        try:
            payload, _ = json.JSONDecoder().raw_decode(text[start:])
            yield payload
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)


def parse_single(text: str) -> Scores:
    """The first JSON object in `text` holding at least one dimension; raises ValueError."""
    for payload in _objects(text):
        if isinstance(payload, dict) and any(d in payload for d in DIMENSIONS):
            return _clean(payload)
    raise ValueError(f"no score object in the judge's reply: {text[:200]!r}")


def parse_scores(text: str) -> tuple[Scores, Scores]:
    """The first JSON object in `text` holding A and B score maps; raises ValueError."""
    for payload in _objects(text):
        if isinstance(payload, dict) and "A" in payload and "B" in payload:
            return _clean(payload["A"]), _clean(payload["B"])
    raise ValueError(f"no score object in the judge's reply: {text[:200]!r}")


def _clean(scores: Any) -> Scores:
    out: Scores = {}
    for d in DIMENSIONS:
        value = scores.get(d) if isinstance(scores, dict) else None
        out[d] = int(value) if isinstance(value, (int, float)) and value in (0, 1, 2) else None
    return out


class LLMJudge:
    """All six dimensions from an OpenAI-compatible endpoint; an unusable reply is retried
    and finally left unscored."""

    def __init__(self, client: ChatClient, retries: int):
        self.client = client
        self.retries = retries

    def _ask(self, prompt: str, parse: Callable[[str], Any]) -> Any:
        messages = [{"role": "user", "content": prompt}]
        for _ in range(self.retries + 1):
            try:
                return parse(self.client.complete(messages))
            except ValueError:
                continue
        return None

    def score(self, row: Row) -> Scores:
        scores = self._ask(judge_prompt_single(row), parse_single)
        return scores if scores is not None else dict.fromkeys(DIMENSIONS)

    def score_pair(self, first: Row, second: Row) -> tuple[Scores, Scores]:
        scores = self._ask(judge_prompt(first, second), parse_scores)
        if scores is not None:
            return scores
        empty: Scores = dict.fromkeys(DIMENSIONS)
        return empty, dict(empty)


class HybridJudge:
    """Rule scores where a rule exists, the LLM's for the other dimensions."""

    def __init__(self, llm: LLMJudge):
        self.rule = RuleJudge()
        self.llm = llm

    @staticmethod
    def _merge(rule: Scores, llm: Scores) -> Scores:
        return {d: rule[d] if d in _RULES else llm[d] for d in DIMENSIONS}

    def score(self, row: Row) -> Scores:
        return self._merge(self.rule.score(row), self.llm.score(row))

    def score_pair(self, first: Row, second: Row) -> tuple[Scores, Scores]:
        llm_a, llm_b = self.llm.score_pair(first, second)
        return self._merge(self.rule.score(first), llm_a), self._merge(
            self.rule.score(second), llm_b
        )


def make_judge(config: RubricConfig) -> Judge:
    """The judge `config.kind` names."""
    if config.kind == "rule":
        return RuleJudge()
    if config.kind not in ("llm", "hybrid"):
        raise JudgeError(f"unknown judge kind {config.kind!r}; expected rule, llm or hybrid")
    llm = LLMJudge(ChatClient(config), config.retries)
    return llm if config.kind == "llm" else HybridJudge(llm)


def _tally(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    counts = {d: {"wins": 0, "losses": 0, "ties": 0, "unscored": 0} for d in DIMENSIONS}
    for record in records:
        for d in DIMENSIONS:
            a, b = record["a"][d], record["b"][d]
            key = (
                "unscored"
                if a is None or b is None
                else ("wins" if a > b else "losses" if a < b else "ties")
            )
            counts[d][key] += 1
    return counts


def judge_pairs(
    pairs: Sequence[tuple[Row, Row]], judge: Judge, seed: int, shown: str = "single"
) -> list[dict[str, Any]]:
    """Score each (A, B) pair: each trajectory on its own (`shown="single"`), or both in one
    prompt in a random order, the scores mapped back to A and B (`"pair"`)."""
    if shown == "single":
        return [
            {"id": a["id"], "set": a["set"], "order": "single", "a": judge.score(a),
             "b": judge.score(b)}
            for a, b in pairs
        ]  # fmt: skip
    rng = random.Random(seed)
    records = []
    for a, b in pairs:
        flipped = rng.random() < 0.5
        shown = (b, a) if flipped else (a, b)
        first, second = judge.score_pair(*shown)
        score_a, score_b = (second, first) if flipped else (first, second)
        order = "BA" if flipped else "AB"
        records.append({"id": a["id"], "set": a["set"], "order": order, "a": score_a, "b": score_b})
    return records


def sample_pairs(
    pairs: Sequence[tuple[Row, Row]], per_set: int, seed: int
) -> list[tuple[Row, Row]]:
    """At most `per_set` random pairs of each set (all when `per_set` <= 0)."""
    by_set: dict[str, list[tuple[Row, Row]]] = defaultdict(list)
    for pair in pairs:
        by_set[pair[0]["set"]].append(pair)
    rng = random.Random(seed)
    picked: list[tuple[Row, Row]] = []
    for name in sorted(by_set, key=set_order):
        group = by_set[name]
        picked.extend(
            group if per_set <= 0 or len(group) <= per_set else rng.sample(group, per_set)
        )
    return picked


def judge_runs(first: Path, second: Path, config: RubricConfig) -> dict[str, Any]:
    """A vs B from two evaluation folders: per-dimension counts per set and overall, plus
    every pair's scores and the order it was shown in."""
    pairs, unmatched = paired_rows(load_rows(first), load_rows(second))
    records = judge_pairs(
        sample_pairs(pairs, config.per_set, config.seed),
        make_judge(config),
        config.seed,
        config.shown,
    )
    by_set: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_set[record["set"]].append(record)
    return {
        "a": str(first),
        "b": str(second),
        "judge": config.kind,
        "shown": config.shown,
        "pairs": len(records),
        "unmatched": unmatched,
        "overall": _tally(records),
        "by_set": {s: _tally(by_set[s]) for s in sorted(by_set, key=set_order)},
        "records": records,
    }
