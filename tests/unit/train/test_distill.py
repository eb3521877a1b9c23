"""Self-distillation between RL phases: which own trajectories are imitated, and the pass
reads them back from the run folder and moves the policy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from tests.unit.train.fakes import tiny_llama
from tests.unit.train.test_sft import CharTokenizer

from searchrl.config.train import DistillConfig, TrainConfig
from searchrl.data.world import Reference
from searchrl.train.distill import distill, own_successes
from searchrl.train.metrics import save_trajectories
from searchrl.train.sft import reference_trajectory
from searchrl.types import Trajectory


def _trajectory(uid: str, em: float, answer_text: str = "<answer> Y </answer>") -> Trajectory:
    reference = Reference(
        id=uid,
        question=f"Where is {uid}",
        golden_answers=("Y",),
        hops=2,
        segments=(
            {"role": "policy", "text": "<think> a </think>\n<search> X </search>"},
            {"role": "env", "text": "\n\n<information>X is in Y</information>\n\n"},
            {"role": "policy", "text": f"<think> b </think>\n{answer_text}"},
        ),
        answer="Y",
        em=em,
    )
    traj = reference_trajectory(reference, CharTokenizer(), use_chat_template=True)
    traj.reward = {"score": em, "em": em}
    return traj


def test_only_right_well_formed_multi_hop_ones_once_per_question() -> None:
    hops = {"a": 2, "b": 1, "c": 3, "d": 2}
    first_a, second_a = _trajectory("a", 1.0), _trajectory("a", 1.0)
    sampled = [
        first_a,
        second_a,  # the same question again
        _trajectory("b", 1.0),  # one hop
        _trajectory("c", 0.0),  # wrong
        _trajectory("d", 1.0, answer_text="Y"),  # right but not in the format
    ]
    assert own_successes(sampled, hops, min_hops=2) == [first_a]
    assert [t.uid for t in own_successes(sampled, hops, min_hops=1)] == ["a", "b"]


def test_a_pass_reads_the_window_from_disk_and_moves_the_policy(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    save_trajectories(folder / "step_1.jsonl", [_trajectory("a", 1.0), _trajectory("b", 0.0)])
    save_trajectories(folder / "step_2.jsonl", [_trajectory("c", 1.0)])
    save_trajectories(folder / "step_3.jsonl", [_trajectory("d", 1.0)])  # outside the window
    model = tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    config = replace(TrainConfig(), distill=DistillConfig(every=2, lr=1e-3, batch_size=2))
    hops = {"a": 2, "b": 2, "c": 2, "d": 2}
    stats = distill(model, config, folder, step=2, hops=hops, pad_id=0, bf16=False)
    assert stats["distill/sampled"] == 3 and stats["distill/examples"] == 2
    assert stats["distill/steps"] == 1 and stats["distill/loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_no_success_no_pass(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    save_trajectories(folder / "step_1.jsonl", [_trajectory("a", 0.0)])
    model = tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    config = replace(TrainConfig(), distill=DistillConfig(every=1))
    stats = distill(model, config, folder, step=1, hops={"a": 2}, pad_id=0, bf16=False)
    assert stats == {"distill/examples": 0.0, "distill/sampled": 1.0}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
