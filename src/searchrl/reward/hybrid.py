"""Search-R2's gated hybrid reward (seed 001 "Hybrid Reward Modeling"):

    R(y) = EM(y) · (1 + r_process(y)),   r_process(y) = (1/M) Σ_i u_i,

u_i ∈ {0, 1} being a judge's verdict on the i-th of the trajectory's M retrieved collections
(0 without searches). A wrong answer scores 0 whatever its searches, so only trajectories with
EM = 1 and at least one search are sent to the judge: the reward is the same, and the judge
(the costly part, which the paper leaves out of its overhead) runs on a fraction of them.

It scores a whole step at once (`score_batch`), so an endpoint or local-model judge sees every
request of the step together and can overlap or batch them. Each breakdown carries what the
step metrics need (`reward_metrics`): the process term, the judged and useful searches, and
this trajectory's share of the judge's wall time and cache hits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from searchrl.data.templates import INFORMATION_OPEN
from searchrl.reward.judges.base import CachedJudge, Collection, JudgeRequest
from searchrl.reward.judges.symbolic import needed_entities, world_support
from searchrl.reward.outcome import em_reward
from searchrl.types import Question, Trajectory


def collections_of(trajectory: Trajectory) -> tuple[Collection, ...]:
    """One Collection per executed search, in order: its doc ids and the observation the
    model read (the i-th `<information>` env segment; "" when it did not fit)."""
    observations = [
        s.text.strip()
        for s in trajectory.segments
        if s.role == "env" and INFORMATION_OPEN in s.text
    ]
    return tuple(
        Collection(tuple(call.doc_ids), observations[i] if i < len(observations) else "")
        for i, call in enumerate(trajectory.searches)
    )


class HybridReward:
    """`reward.kind: hybrid`. With `judge` None (`reward.process: false`) it is plain EM with
    the hybrid's bookkeeping. `questions` (uid → Question) supply a world question's
    supporting passages and chain entities to the oracle and rule judges."""

    def __init__(self, judge: CachedJudge | None, questions: Mapping[str, Question]) -> None:
        self.judge = judge
        self.questions = questions

    def __call__(self, trajectory: Trajectory) -> dict[str, float]:
        """The per-trajectory `RewardFn` form (a batch of one)."""
        return self.score_batch([trajectory])[0]

    def _request(self, trajectory: Trajectory) -> JudgeRequest:
        question = self.questions.get(trajectory.uid)
        metadata = question.metadata if question is not None else {}
        return JudgeRequest(
            question=trajectory.question,
            golden_answers=tuple(trajectory.golden_answers),
            collections=collections_of(trajectory),
            support=world_support(metadata),
            needed=needed_entities(metadata),
        )

    def score_batch(self, trajectories: Sequence[Trajectory]) -> list[dict[str, float]]:
        """Breakdowns for a step's trajectories; the judge is called once for all of them."""
        out = []
        for trajectory in trajectories:
            breakdown = em_reward(trajectory)
            breakdown.update(process=0.0, searches_judged=0.0, useful_searches=0.0)
            breakdown.update(judge_seconds=0.0, judge_cache_hit=0.0)
            breakdown.update(judge_malformed=0.0, judge_unavailable=0.0)
            out.append(breakdown)
        if self.judge is None:
            return out
        gated = [i for i, t in enumerate(trajectories) if out[i]["em"] > 0 and len(t.searches) > 0]
        if not gated:
            return out
        started = time.perf_counter()
        judgments = self.judge.judge([self._request(trajectories[i]) for i in gated])
        share = (time.perf_counter() - started) / len(gated)
        for i, judgment, hit in zip(gated, judgments, self.judge.last.hit, strict=True):
            searches = len(trajectories[i].searches)
            process = judgment.process(searches)
            breakdown = out[i]
            breakdown["score"] = breakdown["em"] * (1.0 + process)
            breakdown["process"] = process
            breakdown["searches_judged"] = float(searches)
            breakdown["useful_searches"] = float(judgment.count or 0)
            breakdown["judge_seconds"] = share
            breakdown["judge_cache_hit"] = float(hit)
            breakdown["judge_malformed"] = float(judgment.error.startswith("malformed"))
            breakdown["judge_unavailable"] = float(judgment.error.startswith("unavailable"))
        return out


def reward_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Step metrics of the hybrid reward (nothing for the other reward kinds):
    `reward/process` (mean r_process over judged trajectories), `reward/useful_share` (useful
    over judged searches), `reward/judged` (trajectories judged: EM = 1 with searches),
    `reward/judge_seconds` (judge wall time), `reward/judge_cache_hits`,
    `reward/judge_malformed` and `reward/judge_unavailable` (judgments without a verdict)."""
    hybrid = [t.reward for t in trajectories if "process" in t.reward]
    if not hybrid:
        return {}
    judged = [r for r in hybrid if r["searches_judged"] > 0]
    searches = sum(r["searches_judged"] for r in judged)
    return {
        "reward/process": sum(r["process"] for r in judged) / len(judged) if judged else 0.0,
        "reward/useful_share": (
            sum(r["useful_searches"] for r in judged) / searches if searches else 0.0
        ),
        "reward/judged": float(len(judged)),
        "reward/judge_seconds": sum(r["judge_seconds"] for r in hybrid),
        "reward/judge_cache_hits": sum(r["judge_cache_hit"] for r in hybrid),
        "reward/judge_malformed": sum(r["judge_malformed"] for r in hybrid),
        "reward/judge_unavailable": sum(r["judge_unavailable"] for r in hybrid),
    }
