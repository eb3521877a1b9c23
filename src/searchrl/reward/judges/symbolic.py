"""The two judges that need no model: `oracle` (the synthetic world's ground truth) and `rule`
(string matching), both cheap enough to judge every search of every step.

Both apply the paper's non-redundancy criterion the same way: what a collection brings counts
only if no earlier collection of the trajectory already brought it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from searchrl.reward.judges.base import JudgeError, JudgeRequest, Judgment
from searchrl.reward.metrics import normalize_answer

_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)$")


def world_support(metadata: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Per hop, the ids of the passages stating that hop's fact (a world question's
    `metadata["support"]`); () for questions from elsewhere."""
    return tuple(tuple(str(i) for i in hop) for hop in metadata.get("support") or ())


def needed_entities(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the entities a world question's chain reaches after its start entity (the
    bridge entities and the answer entity), without a namesake's "(occupation)" suffix: what
    a rule can look for in retrieved text. () for questions from elsewhere."""
    path = metadata.get("path") or ()
    return tuple(dict.fromkeys(_DISAMBIGUATION.sub("", str(t)) for t in path[1:]))


class OracleJudge:
    """Synthetic world only: a collection is useful iff it holds a passage stating a fact of
    the question's chain (a hop) that no earlier collection of the trajectory covered. A
    namesake's page, another fact of the right entity, or the same hop found again are not."""

    name = "oracle"

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        return [self._one(r) for r in requests]

    @staticmethod
    def _one(request: JudgeRequest) -> Judgment:
        if not request.support or not all(request.support):
            raise JudgeError(
                f"the oracle judge needs a world question with supporting passages per hop "
                f"(metadata 'support'); {request.question!r} has none. Regenerate the world "
                "with `searchrl data world`, or use reward.judge=rule"
            )
        hops = [set(h) for h in request.support]
        covered: set[int] = set()
        useful = []
        for collection in request.collections:
            docs = set(collection.doc_ids)
            hit = {h for h, ids in enumerate(hops) if docs & ids} - covered
            covered |= hit
            useful.append(bool(hit))
        return Judgment.of(useful)


def _contains(haystack: str, needle: str) -> bool:
    return bool(needle) and re.search(rf"(?:^| ){re.escape(needle)}(?: |$)", haystack) is not None


class RuleJudge:
    """A collection is useful iff its text names a gold answer or a needed entity (world
    questions: the chain's bridge and answer entities) that no earlier collection named.
    Cheap and model-free, but fooled by namesakes and by pages that merely mention a name."""

    name = "rule"

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        return [self._one(r) for r in requests]

    @staticmethod
    def _one(request: JudgeRequest) -> Judgment:
        targets = {normalize_answer(t) for t in (*request.golden_answers, *request.needed)}
        targets.discard("")
        named: set[str] = set()
        useful = []
        for collection in request.collections:
            text = normalize_answer(collection.text)
            found = {t for t in targets if _contains(text, t)} - named
            named |= found
            useful.append(bool(found))
        return Judgment.of(useful)
