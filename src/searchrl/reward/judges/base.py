"""What a Search-R2 process judge is asked and what it answers, and the cache in front of it.

A judge sees one trajectory's retrieved collections in the order they were returned, with the
question and its gold answers, and marks each collection useful or not (seed 001 "Hybrid
Reward Modeling": relevant to the answer, not irrelevant, not redundant with earlier
collections). Because usefulness depends on the earlier collections, the unit judged and
cached is the whole ordered sequence of a trajectory's collections, keyed by the question
text, its gold answers and each collection's doc ids and text. The GRPO samples of one
question often search alike, so repeats within a step and across steps are answered once.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from searchrl.utils.chat_client import JudgeError

__all__ = ["CachedJudge", "Collection", "Judge", "JudgeError", "JudgeRequest", "Judgment"]


@dataclass(frozen=True)
class Collection:
    """The passages one search returned: their ids and the observation text the model read
    (empty when the observation did not fit into the trajectory)."""

    doc_ids: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class JudgeRequest:
    """One trajectory's searches to judge. `support` (per hop, the ids of the passages that
    state the hop's fact) and `needed` (entity names the answer chain passes through) come
    from a synthetic world's question metadata; they are empty elsewhere."""

    question: str
    golden_answers: tuple[str, ...]
    collections: tuple[Collection, ...]
    support: tuple[tuple[str, ...], ...] = ()
    needed: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        """Cache key: what a judge's verdict may depend on. `support` and `needed` are
        functions of the question, so they need not be part of it."""
        return (self.question, self.golden_answers, self.collections)


@dataclass(frozen=True)
class Judgment:
    """A judge's verdict on one request.

    `count` is the number of useful collections (what the paper's judge reports as "Final
    Answer: N"), None when there is no usable verdict; `useful` is the per-collection verdict
    when the judge gave one. `error` is "" for a usable verdict, else starts with `malformed:`
    (the judge answered, but not in the asked format) or `unavailable:` (no answer at all)."""

    count: int | None
    useful: tuple[bool, ...] | None = None
    error: str = ""

    @classmethod
    def of(cls, useful: Sequence[bool]) -> Judgment:
        """A complete per-collection verdict."""
        return cls(count=sum(useful), useful=tuple(useful))

    def process(self, searches: int) -> float:
        """r_process = (1/M) Σ u_i; 0 without searches or without a usable verdict."""
        if self.count is None or searches <= 0:
            return 0.0
        return min(max(self.count / searches, 0.0), 1.0)


class Judge(Protocol):
    """Judges many requests at once, so remote or batched judges can overlap them."""

    name: str

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        """One Judgment per request, in order. Never raises for one bad answer (that is a
        `malformed:` judgment); raises JudgeError only when judging cannot happen at all."""
        ...


@dataclass
class JudgeStats:
    """What one `CachedJudge.judge` call did."""

    requests: int = 0
    cache_hits: int = 0
    """Requests answered without asking the judge: remembered, or repeated in the batch."""
    seconds: float = 0.0
    """Wall time spent in the underlying judge."""
    hit: list[bool] = field(default_factory=list)
    """Per request: answered from the cache or by an identical request of the same batch."""


class CachedJudge:
    """A judge behind a bounded LRU cache keyed by `JudgeRequest.key`. Identical requests of
    one batch are asked once. `unavailable:` judgments are not remembered (the endpoint may
    come back); `malformed:` ones are (a greedy judge would answer the same again)."""

    def __init__(self, inner: Judge, size: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.size = size
        self._cache: OrderedDict[tuple[Any, ...], Judgment] = OrderedDict()
        self.last = JudgeStats()

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        """Judgments for `requests`; `self.last` says how many were cache hits and how long
        the underlying judge took."""
        stats = JudgeStats(requests=len(requests))
        found: dict[tuple[Any, ...], Judgment] = {}
        missing: dict[tuple[Any, ...], JudgeRequest] = {}
        for request in requests:
            key = request.key
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                found[key] = cached
                stats.hit.append(True)
            elif key in missing:
                stats.hit.append(True)
            else:
                missing[key] = request
                stats.hit.append(False)
        if missing:
            started = time.perf_counter()
            answers = self.inner.judge(list(missing.values()))
            stats.seconds = time.perf_counter() - started
            for key, judgment in zip(missing, answers, strict=True):
                found[key] = judgment
                if not judgment.error.startswith("unavailable") and self.size > 0:
                    self._cache[key] = judgment
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        stats.cache_hits = sum(stats.hit)
        self.last = stats
        return [found[r.key] for r in requests]
