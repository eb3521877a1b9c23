"""Which prompts a step trains on: distinct prompts per step, failed retrievals dropped with
their group, and dynamic sampling keeping exactly `batch_size` informative groups."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.metrics import StageTimer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.train.sampling import PromptSampler, split_groups
from searchrl.types import Question, Trajectory


def test_a_batch_straddling_an_epoch_never_repeats_a_question() -> None:
    sampler = PromptSampler(questions(7), seed=3)
    served: Counter[str] = Counter()
    for _ in range(40):
        batch = sampler.next_batch(3)
        uids = [q.uid for q in batch]
        assert len(set(uids)) == 3
        served.update(uids)
    assert set(served) == {q.uid for q in questions(7)}
    assert max(served.values()) - min(served.values()) <= 2  # nothing lost or starved


def test_excluded_questions_wait_for_the_next_draw_and_state_resumes() -> None:
    sampler = PromptSampler(questions(6), seed=0)
    first = sampler.next_batch(2)
    second = sampler.next_batch(3, exclude={q.uid for q in first})
    assert not {q.uid for q in first} & {q.uid for q in second}
    copy = PromptSampler(questions(6), seed=0)
    copy.load_state(sampler.state())
    assert [q.uid for q in copy.next_batch(4)] == [q.uid for q in sampler.next_batch(4)]


def rollout_with(answers: dict[str, list[str]], failed: set[str] = frozenset()):  # type: ignore[no-untyped-def]
    """Scripted trajectories whose answers per question are given; `failed` questions' first
    sample had a retrieval error."""

    def rollout(qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool):  # type: ignore[no-untyped-def]
        out = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
        for traj in out:
            traj.answer = answers[traj.uid][traj.sample]
            if traj.uid in failed and traj.sample == 0:
                traj.stats.failed = "retrieval: server down"
        return out

    return rollout


def make(rollout, n_questions: int = 6, **overrides: object) -> Trainer:  # type: ignore[no-untyped-def]
    config = tiny_config(**overrides)
    policy = prepare_policy(tiny_llama(), config.policy)
    return Trainer(
        config, policy, None, frozen_reference(policy, lora=False), 0, rollout, em_reward,
        questions(n_questions),
    )  # fmt: skip


MIXED = {f"q{i}": ["yes", "no"] for i in range(6)}


def test_groups_with_a_failed_retrieval_are_dropped_whole_and_counted() -> None:
    trainer = make(rollout_with(MIXED, failed={"q0", "q1", "q2", "q3", "q4", "q5"}))
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    metrics, sampled = trainer.step()
    assert metrics["train/dropped_failed"] == 8 and metrics["train/groups_trained"] == 0
    assert len(sampled) == 8
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())

    trainer = make(rollout_with(MIXED, failed={"q0", "q1", "q2"}))
    sampled, trained, counts = trainer.collector.collect(trainer.step_count, StageTimer())
    failed_uids = {t.uid for t in sampled if t.stats.failed}
    assert failed_uids and not failed_uids & {t.uid for t in trained}
    assert counts["train/dropped_failed"] == 2 * len(failed_uids)


def test_dynamic_sampling_keeps_exactly_batch_size_informative_groups() -> None:
    # q0..q5: only odd questions have differing answers; the batch wants 2 groups.
    answers = {f"q{i}": (["yes", "no"] if i % 2 else ["yes", "yes"]) for i in range(12)}
    trainer = make(
        rollout_with(answers), n_questions=12, batch_size=2, mini_batch_size=2,
        algo={"dynamic_sampling": True, "max_sampling_rounds": 4},
    )  # fmt: skip
    for _ in range(3):
        sampled, trained, counts = trainer.collector.collect(trainer.step_count, StageTimer())
        groups = split_groups(trained)
        assert len(groups.informative) == 2 and not groups.flat
        assert counts["train/groups_trained"] == 2
        assert len({t.uid for t in sampled}) == counts["train/groups_sampled"]
        trainer.step_count += 1
    off = make(rollout_with(answers), n_questions=12, batch_size=2, mini_batch_size=2)
    _, trained, counts = off.collector.collect(off.step_count, StageTimer())
    assert counts["train/sampling_rounds"] == 1 and len(trained) == 4


def test_split_groups_counts_a_single_sample_as_informative() -> None:
    traj = Trajectory(id="a#0", question="?", golden_answers=["x"], uid="a")
    traj.reward = {"score": 1.0}
    assert len(split_groups([traj]).informative) == 1
