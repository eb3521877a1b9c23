"""The drift diagnostics logged every step, and the trainer's Dr. GRPO wiring."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.metrics import advantage_length_metrics, drift_metrics
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.types import Question, Trajectory


def finished(uid: str, answer: str | None, reason: str, searches: int) -> Trajectory:
    t = Trajectory(id=f"{uid}#0", question="?", golden_answers=["a"], uid=uid, answer=answer)
    t.stats.stop_reason, t.stats.searches = reason, searches
    return t


def test_unanswered_share_by_stop_reason_and_searches_by_hops() -> None:
    trajectories = [
        finished("q1", "a", "answer", 1),
        finished("q2", None, "max_turns", 5),
        finished("q2", None, "length", 3),
        finished("q3", "b", "answer", 2),
    ]
    hops = {"q1": 1, "q2": 3, "q3": 1}
    out = drift_metrics(trajectories, hops)
    assert out["rollout/no_answer"] == 0.5
    assert out["rollout/no_answer/max_turns"] == 0.25
    assert out["rollout/no_answer/length"] == 0.25
    assert out["env/searches_by_hops/1"] == 1.5
    assert out["env/searches_by_hops/3"] == 4.0
    assert "env/searches_by_hops/2" not in out


def test_policy_length_of_positive_and_negative_advantage_rows() -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    advantages = torch.tensor([[0.5] * 4, [-0.5] * 4, [0.0] * 4]) * mask
    out = advantage_length_metrics(advantages, mask)
    assert out == {"adv/policy_len_pos": 2.0, "adv/policy_len_neg": 4.0}
    # meta rows after the trajectories are left out
    assert advantage_length_metrics(advantages, mask, rows=1)["adv/policy_len_neg"] == 0.0


def test_loss_norm_tokens_defaults_to_the_generation_budget() -> None:
    config = tiny_config()
    rollout = replace(config.rollout, max_turns=4, max_response_tokens=120)
    assert replace(config, rollout=rollout).loss_norm_tokens == 600
    algo = replace(config.algo, loss_norm_tokens=256)
    assert replace(config, rollout=rollout, algo=algo).loss_norm_tokens == 256


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_a_step_logs_the_drift_diagnostics(agg: str) -> None:
    config = tiny_config(algo={"loss_agg": agg, "kl_coef": 0.0})
    policy = prepare_policy(tiny_llama(), config.policy)
    hopped = [Question(q.uid, q.question, q.golden_answers, hops=2) for q in questions()]
    trainer = Trainer(
        config, policy, None, frozen_reference(policy, lora=False), 0, scripted_rollout,
        em_reward, hopped,
    )  # fmt: skip
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    metrics, _ = trainer.step()
    assert metrics["env/searches_by_hops/2"] == 1.0
    assert metrics["rollout/no_answer"] == 0.0
    assert metrics["adv/policy_len_pos"] > 0 and metrics["adv/policy_len_neg"] > 0
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())


def test_the_rl_bar_says_which_stage_a_step_is_in() -> None:
    """A CPU step takes minutes: the bar shows the step, its stage and the turns generated."""
    from rich.console import Console
    from rich.progress import Progress

    from searchrl.train.metrics import StageTimer
    from searchrl.train.run import LiveStep

    with Progress(console=Console(file=None, force_terminal=False)) as bar:
        bar.add_task("", total=3)
        live = LiveStep(bar, lambda m: f"reward={m['r']}" if m else "")
        live.start(2, {"r": 0.5})
        live.turns(7)
        assert bar.tasks[0].description == "step 2: gen (7 turns)  | reward=0.5"
        timer = StageTimer(live.stage)
        with timer("update_actor"):
            assert bar.tasks[0].description == "step 2: update_actor  | reward=0.5"
        assert "update_actor" in timer.seconds
