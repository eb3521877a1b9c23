"""`refiner.joint_share`: a share of the meta rows trained, each weighted so a decision weighs in
expectation what it weighs with all trained; the rows the update reads; a resumed run draws
the same share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tests.unit.refiner.joint_fakes import fake_refiner
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import prepare_policy


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_a_share_of_the_meta_rows_weighs_what_all_of_them_weigh_in_expectation(
    aggregation: str,
) -> None:
    """`refiner.joint_share`: k of the m meta rows are trained, each at m/k times its weight,
    and the untrained decisions stay in their trajectory's normalisation, so a trajectory row
    weighs exactly what it weighs with every meta row trained, and a meta row's weight
    averaged over the k-subsets (equally likely) is its weight with all trained."""
    from searchrl.algo.losses import make_loss_weights
    from searchrl.train.joint import RowLayout, choose_meta_rows

    weights = make_loss_weights(aggregation)
    traj = torch.tensor([[1.0, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    decision = torch.tensor([[1.0, 1, 0, 0, 0, 0]] * 4)
    parents, sizes = [0, 0, 1, 1], [2, 2, 2, 2]
    full_layout = RowLayout.of(2, parents)
    full = full_layout.weighting(weights, torch.cat([traj, decision]))(list(range(6)))
    mean = torch.zeros_like(full)
    subsets: set[tuple[int, ...]] = set()
    for seed in range(200):
        generator = torch.Generator().manual_seed(seed)
        kept, layout = choose_meta_rows(2, parents, sizes, 0.5, generator)
        if tuple(kept) in subsets:
            continue
        subsets.add(tuple(kept))
        assert len(kept) == 2 and layout.meta_scale == 2.0
        mask = torch.cat([traj, decision[kept]])
        w = layout.weighting(weights, mask)(list(range(4)))
        assert torch.allclose(w[:2], full[:2])  # trajectories: as if every decision trained
        for row, j in enumerate(kept, start=2):
            mean[2 + j] += w[row]
    assert len(subsets) == 6  # every 2-of-4 subset met
    assert torch.allclose(mean[2:] / len(subsets), full[2:])


def _row_weights(
    monkeypatch: pytest.MonkeyPatch, share: float
) -> tuple[dict[int, torch.Tensor], dict[str, float], tuple[int, ...]]:
    """One joint step of 8 trajectories (one decision each): the loss weights of every row the
    update ran forward, the step's metrics, and each row's trajectory."""
    from searchrl.train import loop

    seen: dict[int, torch.Tensor] = {}
    original = loop.policy_micro_loss

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        inner = original(*args, **kwargs)

        def loss(micro: list[int], weights: torch.Tensor):  # type: ignore[no-untyped-def]
            seen.update({row: w.detach().clone() for row, w in zip(micro, weights, strict=True)})
            return inner(micro, weights)

        return loss

    monkeypatch.setattr(loop, "policy_micro_loss", spy)
    config = tiny_config(
        refiner={"enabled": True, "joint": True, "joint_share": share}, algo={"kl_coef": 0.0}
    )
    trainer = Trainer(
        config, tiny_llama(), None, None, 0, scripted_rollout, em_reward, questions(),
        refine=fake_refiner([10, 2]),
    )  # fmt: skip
    metrics, _ = trainer.step()
    return seen, metrics, trainer.layout.owner


def test_a_share_of_the_meta_rows_is_all_the_update_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """joint_share 0.5: the update runs forward on the 8 trajectories and 4 of the 8 decisions,
    the trajectories weigh what they weigh with every decision trained, and a trained decision
    token weighs twice a token of its trajectory."""
    full, full_metrics, _ = _row_weights(monkeypatch, 1.0)
    half, metrics, owner = _row_weights(monkeypatch, 0.5)
    assert sorted(full) == list(range(16)) and sorted(half) == list(range(12))
    assert full_metrics["refiner/meta_rows_trained"] == 8
    assert metrics["refiner/meta_rows_trained"] == 4
    for row in range(8):
        assert torch.allclose(half[row], full[row])
    for row in range(8, 12):
        meta = half[row]
        assert int((meta > 0).sum()) == 2
        own = half[owner[row]]
        token = float(own[own > 0][0])  # a token of its trajectory
        assert meta[meta > 0].tolist() == pytest.approx([2 * token] * 2)


def test_joint_share_rules() -> None:
    from searchrl.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape("refiner.joint_share: must be greater than 0")):
        tiny_config(refiner={"enabled": True, "joint": True, "joint_share": 0.0})
    with pytest.raises(ConfigError, match=re.escape("joint_share: a share of the meta rows needs")):
        tiny_config(refiner={"enabled": True, "joint_share": 0.5})


def test_a_resumed_run_trains_the_same_share_of_decisions(tmp_path: Path) -> None:
    """A run resumed from a checkpoint under `refiner.joint_share` trains the same decisions
    at the next step (drawn from seed and step) and ends with the same weights."""
    from searchrl.train import checkpoint as ckpt

    def trainer() -> Trainer:
        config = tiny_config(
            refiner={"enabled": True, "joint": True, "joint_share": 0.25}, algo={"kl_coef": 0.0}
        )
        torch.manual_seed(0)
        policy = prepare_policy(tiny_llama(), config.policy)
        return Trainer(
            config, policy, None, None, 0, scripted_rollout, em_reward, questions(),
            refine=fake_refiner([10, 2]),
        )  # fmt: skip

    straight = trainer()
    straight.step()
    straight.step()
    first = trainer()
    first.step()
    first.save(tmp_path)
    resumed = trainer()
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None
    resumed.restore(latest)
    resumed.step()
    assert resumed.layout == straight.layout and len(straight.layout.owner) == 8 + 2
    a, b = straight.policy.state_dict(), resumed.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
