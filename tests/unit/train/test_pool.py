"""The RL pool: screening keeps the questions whose samples score differently, its verdicts are
cached per start policy (a second run rolls nothing out), and the probe stays held out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.unit.train.fakes import tiny_config, tiny_llama

from searchrl.data.benchmarks import DataError
from searchrl.reward.outcome import em_reward
from searchrl.train.models import prepare_policy
from searchrl.train.pool import check_disjoint, gold_retrieved, screen_pool
from searchrl.types import Document, Hit, Question, Trajectory

PATTERN = {"always": [1, 1, 1, 1], "never": [0, 0, 0, 0], "mixed": [1, 0, 0, 1]}


def pool() -> list[Question]:
    kinds = ["always", "never", "mixed", "mixed", "never", "always"]
    return [Question(uid=f"{k}{i}", question=f"q {k} {i}", golden_answers=("yes",), hops=1 + i % 2)
            for i, k in enumerate(kinds)]  # fmt: skip


class Rollout:
    """Answers right or wrong as each question's pattern says; counts the questions it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(
        self, qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]:
        out = []
        for q in qs:
            self.seen.append(q.uid)
            for s in range(n_samples):
                t = Trajectory(id=f"{q.uid}#{s}", question=q.question, golden_answers=["yes"])
                t.uid = q.uid
                right = PATTERN[q.uid.rstrip("0123456789")][s]
                t.answer = "yes" if right else "no"
                t.metrics = {"em": float(right)}
                out.append(t)
        return out


def config(tmp_path: Path, **screen: object):  # type: ignore[no-untyped-def]
    return tiny_config(screen={"samples": 4, "cache_dir": str(tmp_path), **screen})


def test_screening_keeps_mixed_questions_and_caches_the_verdicts(tmp_path: Path) -> None:
    policy = prepare_policy(tiny_llama(), tiny_config().policy)
    rollout = Rollout()
    kept, metrics, verdicts = screen_pool(pool(), rollout, em_reward, policy, config(tmp_path),
                                          show=False)  # fmt: skip
    assert sorted(q.uid for q in kept) == ["mixed2", "mixed3"]
    assert metrics["screen/kept_share"] == pytest.approx(2 / 6)
    assert metrics["screen/always_solved"] == pytest.approx(2 / 6)
    assert metrics["screen/never_solved"] == pytest.approx(2 / 6)
    assert verdicts["mixed2"]["successes"] == 2
    assert sorted(rollout.seen) == sorted(q.uid for q in pool())
    again = Rollout()
    kept_again, _, _ = screen_pool(pool(), again, em_reward, policy, config(tmp_path), show=False)
    assert again.seen == []  # every verdict came from the cache
    assert [q.uid for q in kept_again] == [q.uid for q in kept]


def test_another_start_policy_screens_again(tmp_path: Path) -> None:
    first = prepare_policy(tiny_llama(seed=0), tiny_config().policy)
    screen_pool(pool(), Rollout(), em_reward, first, config(tmp_path), show=False)
    other = prepare_policy(tiny_llama(seed=1), tiny_config().policy)
    rollout = Rollout()
    screen_pool(pool(), rollout, em_reward, other, config(tmp_path), show=False)
    assert len(rollout.seen) == 6


def test_screening_that_keeps_nothing_says_so(tmp_path: Path) -> None:
    policy = prepare_policy(tiny_llama(), tiny_config().policy)
    flat = [q for q in pool() if not q.uid.startswith("mixed")]
    with pytest.raises(DataError, match="nothing is left to train on"):
        screen_pool(flat, Rollout(), em_reward, policy, config(tmp_path), show=False)


def test_screening_off_keeps_the_pool_untouched(tmp_path: Path) -> None:
    policy = prepare_policy(tiny_llama(), tiny_config().policy)
    rollout = Rollout()
    kept, metrics, _ = screen_pool(pool(), rollout, em_reward, policy, config(tmp_path, samples=0),
                                   show=False)  # fmt: skip
    assert len(kept) == 6 and metrics == {} and rollout.seen == []


class Passages:
    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        return [[Hit(Document(id="1", contents=f'"T"\nthe answer is {"yes" if "0" in q else "no"}'),
                     1.0)] for q in queries]  # fmt: skip


def test_gold_retrieved_keeps_questions_their_passages_answer() -> None:
    kept = gold_retrieved(pool(), Passages(), topk=3)  # type: ignore[arg-type]
    assert [q.uid for q in kept] == ["always0"]


def test_a_probe_question_in_the_pool_is_refused() -> None:
    with pytest.raises(DataError, match="probe questions are in the training pool"):
        check_disjoint(pool(), pool()[:1])
    check_disjoint(pool()[1:], pool()[:1])
