"""The gated hybrid reward R = EM · (1 + (1/M) Σ u_i): its gating table, the switch that turns
the process term off, the judge cache, and the step metrics."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from searchrl.config.train import RewardConfig
from searchrl.data.templates import format_information
from searchrl.reward.hybrid import HybridReward, collections_of, reward_metrics
from searchrl.reward.judges import CachedJudge, JudgeRequest, Judgment, RuleJudge
from searchrl.reward.scoring import make_reward, score_batch
from searchrl.types import SearchCall, Trajectory

PARIS = '"Paris"\nParis is the capital of France.'
LYON = '"Lyon"\nLyon lies on the Rhone.'
EIFFEL = '"Eiffel Tower"\nThe tower stands in Paris, France.'


def trajectory(
    answer: str, docs: Sequence[Sequence[str]], question: str = "Capital?"
) -> Trajectory:
    """A finished trajectory whose i-th search returned the passages `docs[i]`."""
    t = Trajectory(id=f"{question}#0", question=question, golden_answers=["Paris"], uid=question)
    for turn, passages in enumerate(docs):
        t.append("policy", "<search> q </search>", [1, 2])
        ids = [p.split('"')[1] for p in passages]
        t.searches.append(SearchCall(query=f"q{turn}", doc_ids=ids, turn=turn))
        t.append("env", format_information(list(passages)), [3, 4, 5])
    t.append("policy", f"<answer> {answer} </answer>", [6])
    t.answer = answer
    return t


class CountingRule(RuleJudge):
    """The rule judge, counting the requests that reach it (to see the cache work)."""

    def __init__(self) -> None:
        self.asked: list[JudgeRequest] = []

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        self.asked.extend(requests)
        return super().judge(requests)


def hybrid(size: int = 100) -> tuple[HybridReward, CountingRule]:
    inner = CountingRule()
    return HybridReward(CachedJudge(inner, size), {}), inner


@pytest.mark.parametrize(
    ("answer", "docs", "expected"),
    [
        ("Lyon", [], 0.0),  # EM 0, no search
        ("Lyon", [[PARIS], [LYON]], 0.0),  # EM 0, some useful: gated to 0
        ("Lyon", [[PARIS]], 0.0),  # EM 0, all useful: still 0
        ("Paris", [], 1.0),  # EM 1, M = 0: the process term is 0
        ("Paris", [[PARIS], [LYON]], 1.5),  # EM 1, 1 of 2 useful
        ("Paris", [[LYON], [PARIS]], 1.5),  # order does not matter for a single useful one
        ("Paris", [[PARIS]], 2.0),  # EM 1, all useful
    ],
)
def test_gating_table(answer: str, docs: list[list[str]], expected: float) -> None:
    reward, inner = hybrid()
    out = reward(trajectory(answer, docs))
    assert out["score"] == pytest.approx(expected)
    assert out["em"] == float(answer == "Paris")
    judged = answer == "Paris" and bool(docs)
    assert len(inner.asked) == int(judged)  # wrong answers and search-free ones are never judged
    assert out["searches_judged"] == (len(docs) if judged else 0)


def test_redundant_collection_is_not_useful() -> None:
    reward, _ = hybrid()
    out = reward(trajectory("Paris", [[PARIS], [PARIS], [LYON]]))
    assert out["useful_searches"] == 1 and out["score"] == pytest.approx(1 + 1 / 3)


def test_process_switch_off_is_plain_em_and_never_judges() -> None:
    config = RewardConfig(kind="hybrid", process=False)
    reward = make_reward(config)
    right = trajectory("Paris", [[PARIS]])
    assert reward(right)["score"] == 1.0 and reward(right)["process"] == 0.0
    on = make_reward(RewardConfig(kind="hybrid", judge="rule"))
    assert on(right)["score"] == 2.0
    assert make_reward(RewardConfig(kind="em"))(right)["score"] == 1.0


def test_cache_answers_repeats_within_a_batch_and_across_steps() -> None:
    reward, inner = hybrid()
    batch = [trajectory("Paris", [[PARIS], [LYON]]) for _ in range(4)]
    batch.append(trajectory("Paris", [[LYON], [PARIS]]))
    first = score_batch(reward, batch)
    assert len(inner.asked) == 2  # four identical samples asked once, plus the other order
    assert [o["judge_cache_hit"] for o in first] == [0.0, 1.0, 1.0, 1.0, 0.0]
    for t, breakdown in zip(batch, first, strict=True):
        t.reward = breakdown
    metrics = reward_metrics(batch)
    assert metrics["reward/judge_cache_hits"] == 3.0
    assert metrics["reward/useful_share"] == pytest.approx(0.5)
    assert metrics["reward/judged"] == 5.0 and metrics["reward/process"] == pytest.approx(0.5)
    assert metrics["reward/judge_seconds"] >= 0.0
    second = score_batch(reward, batch[:1])
    assert len(inner.asked) == 2 and second[0]["judge_cache_hit"] == 1.0
    uncached, inner_uncached = hybrid(size=0)
    score_batch(uncached, batch[:1])
    score_batch(uncached, batch[:1])
    assert len(inner_uncached.asked) == 2


def test_outcome_rewards_log_no_hybrid_metrics() -> None:
    t = trajectory("Paris", [[PARIS]])
    t.reward = make_reward(RewardConfig(kind="em"))(t)
    assert reward_metrics([t]) == {}


def test_collections_follow_the_searches() -> None:
    t = trajectory("Paris", [[PARIS], [LYON, EIFFEL]])
    t.segments.insert(1, t.segments[0].__class__("env", "\nMy previous action is invalid.", [9]))
    found = collections_of(t)
    assert [c.doc_ids for c in found] == [("Paris",), ("Lyon", "Eiffel Tower")]
    assert found[1].text.startswith('<information>Doc 1(Title: "Lyon")')
    t.searches.append(SearchCall(query="cut off", doc_ids=["x"], turn=3))
    assert collections_of(t)[-1].text == ""  # an observation that did not fit: nothing shown
