"""The learning-signal measures: the group budget, the distance moved (full weights and LoRA
alike), pass@k, and the KL from the start policy on its own samples."""

from __future__ import annotations

import math

import pytest
import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.train.models import prepare_policy
from searchrl.train.signal import Anchor, Probe, SignalBudget, pass_at_k
from searchrl.types import Trajectory


def test_budget_counts_groups_and_rates_them_per_hour() -> None:
    budget = SignalBudget()
    counts = {"train/groups_sampled": 8, "train/groups_informative": 5, "train/groups_trained": 4}
    budget.add(counts, trajectories=16, seconds=900.0)
    out = budget.add(counts, trajectories=16, seconds=900.0)
    assert out["signal/sampled_total"] == 16
    assert out["signal/informative_total"] == 10
    assert out["signal/trained_total"] == 8
    assert out["signal/informative_share"] == pytest.approx(10 / 16)
    assert out["signal/informative_per_hour"] == pytest.approx(16.0)  # 8 trained in 30 min
    assert out["signal/trajectories_per_hour"] == pytest.approx(64.0)
    again = SignalBudget()
    again.load_state(budget.state())
    assert again == budget


def test_anchor_measures_the_full_weights_moved() -> None:
    policy = prepare_policy(tiny_llama(), tiny_config().policy)
    anchor = Anchor(policy)
    assert anchor.metrics()["signal/moved"] == 0.0
    param = next(p for p in policy.parameters() if p.requires_grad)
    with torch.no_grad():
        param[0].add_(0.5)
    moved = anchor.metrics()
    assert moved["signal/moved"] == pytest.approx(0.5 * math.sqrt(param[0].numel()), rel=1e-5)
    assert 0 < moved["signal/moved_rel"] < 1


def test_anchor_measures_lora_by_the_effective_weight_change() -> None:
    policy = prepare_policy(tiny_llama(), tiny_config(policy={"lora_rank": 4}).policy)
    anchor = Anchor(policy)
    assert anchor.start == {}  # nothing kept: B starts at zero
    assert anchor.metrics()["signal/moved"] == 0.0
    expected = 0.0
    torch.manual_seed(1)
    for module in policy.modules():
        if hasattr(module, "lora_B") and "default" in module.lora_B:
            with torch.no_grad():
                module.lora_B["default"].weight.normal_()
            a = module.lora_A["default"].weight.detach()
            b = module.lora_B["default"].weight.detach()
            expected += float((module.scaling["default"] * b @ a).pow(2).sum())
    assert anchor.metrics()["signal/moved"] == pytest.approx(math.sqrt(expected), rel=1e-4)


def _traj(uid: str, em: float) -> Trajectory:
    t = Trajectory(id=uid, question=uid, golden_answers=["x"])
    t.uid, t.metrics = uid, {"em": em}
    return t


def test_pass_at_k_counts_samples_and_questions() -> None:
    trajectories = [_traj("a", 1), _traj("a", 0), _traj("b", 0), _traj("b", 0)]
    out = pass_at_k(trajectories)
    assert out["probe/pass@1"] == 0.25
    assert out["probe/pass@k"] == 0.5 and out["probe/k"] == 2


def test_probe_kl_is_zero_until_the_policy_moves() -> None:
    policy = prepare_policy(tiny_llama(), tiny_config().policy)
    probe = Probe(questions(3), samples=2, seed=0, pad_id=0)
    metrics, trajectories = probe.run(scripted_rollout, policy, {})
    assert len(trajectories) == 6
    assert metrics["signal/probe_kl"] == 0.0
    assert metrics["signal/probe_kl_k3"] == 0.0
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = probe.kl(policy)
    assert moved["signal/probe_kl_k3"] > 0
    restored = Probe(questions(3), samples=2, seed=0, pad_id=0)
    restored.load_state(probe.state())
    assert restored.kl(policy) == moved
