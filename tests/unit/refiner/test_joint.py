"""Joint optimization: the refiner's decisions are trained on (as extra rows carrying their
trajectory's advantage) only under `refiner.joint`; the refiner's diagnostics by hand."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch
from tests.unit.refiner.joint_fakes import fake_refiner
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.refiner import RefineOutcome, meta_rows, refiner_metrics
from searchrl.refiner.diagnostics import weighted_cov
from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.types import MetaDecision, Question, Refinement, Segment, Trajectory


def step_weights(joint: bool, decision_ids: list[int]) -> dict[str, torch.Tensor]:
    config = tiny_config(refiner={"enabled": True, "joint": joint}, algo={"kl_coef": 0.0})
    torch.manual_seed(0)
    policy = prepare_policy(tiny_llama(), config.policy)
    trainer = Trainer(
        config, policy, None, frozen_reference(policy, lora=False), 0, scripted_rollout,
        em_reward, questions(), refine=fake_refiner(decision_ids),
    )  # fmt: skip
    metrics, trajectories = trainer.step()
    assert all(t.refinement is not None for t in trajectories)
    assert metrics["refiner/accept_rate"] == 1.0 and metrics["refiner/revision_rate"] == 0.0
    assert "refiner/seconds_share" in metrics
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def test_meta_rows_get_gradient_only_under_joint() -> None:
    plain_a, plain_b = step_weights(False, [10, 2]), step_weights(False, [11, 3])
    assert all(torch.equal(plain_a[k], plain_b[k]) for k in plain_a)
    joint_a, joint_b = step_weights(True, [10, 2]), step_weights(True, [11, 3])
    assert any(not torch.equal(joint_a[k], joint_b[k]) for k in joint_a)
    assert any(not torch.equal(joint_a[k], plain_a[k]) for k in joint_a)


def test_meta_rows_mask_the_decision_and_carry_the_advantage() -> None:
    config = tiny_config(refiner={"enabled": True, "joint": True}, algo={"kl_coef": 0.0})
    trainer = Trainer(config, tiny_llama(), None, None, 0, scripted_rollout, em_reward, questions())
    trajs = scripted_rollout(questions(2), n_samples=2, seed=0, greedy=False)
    fake_refiner([10, 2])(trajs, seed=0, greedy=False)
    for t, score in zip(trajs, [1.0, 0.0, 1.0, 1.0], strict=True):
        t.reward = {"score": score}
    rows, parents = meta_rows(trajs)
    assert parents == [0, 1, 2, 3] and rows[0].prompt_ids == [5, 6, 7, 8]
    exp = trainer._experience([*trajs, *rows])
    exp = trainer._advantages(exp, trajs, parents)
    meta_mask = exp.mask[4:]
    assert meta_mask.sum(-1).tolist() == [2.0] * 4  # the two decision tokens only
    seq_adv = [float(exp.advantages[i][exp.mask[i] > 0][0]) for i in range(4)]
    assert seq_adv[0] > 0 > seq_adv[1] and seq_adv[2] == pytest.approx(0.0, abs=1e-5)
    for j, parent in enumerate(parents):
        values = exp.advantages[4 + j][meta_mask[j] > 0]
        assert values.tolist() == pytest.approx([seq_adv[parent]] * 2)
        assert float(exp.advantages[4 + j][meta_mask[j] == 0].abs().sum()) == 0.0


def test_weighted_covariance_by_hand() -> None:
    assert weighted_cov([1, 0], [2, -2], [1, 1]) == pytest.approx(1.0)  # E[αg]=1, E[α]E[g]=0
    assert weighted_cov([1, 0], [2, -2], [3, 1]) == pytest.approx(1.5 - 0.75 * 1.0)
    assert weighted_cov([], [], []) == 0.0


def _traj(score: float, em: float) -> Trajectory:
    t = Trajectory(id="t", question="q", golden_answers=["a"])
    t.append("policy", "p", [1])
    t.reward, t.metrics = {"score": score}, {"em": em}
    return t


def test_refiner_metrics_by_hand() -> None:
    decision = MetaDecision("m", [1], Segment("meta", "1", [1]), 1, 1, 0.5)
    orig = [_traj(0, 0), _traj(1, 1), _traj(1, 1), _traj(0, 0)]
    final = [_traj(1, 1), orig[1], orig[2], orig[3]]
    final[0].refinement = Refinement(True, 1, 0, 0.5, 1, [decision])
    for t in final[1:]:
        t.refinement = Refinement(False, 0, 1, -0.5, 0, [decision])
    out = RefineOutcome(final=final, originals=orig, accepted=3, probed=[1])
    out.trims = {0: final[0], 1: _traj(0, 0)}
    out.random_cuts = {0: _traj(0, 0), 1: _traj(0, 0)}
    m = refiner_metrics([out])
    assert m["refiner/revision_rate"] == 0.25 and m["refiner/accept_rate"] == 0.75
    assert m["refiner/revision_wrong_to_right"] == 1 and m["refiner/revision_unchanged"] == 0
    # α=0, gap 0−1=−1 (weight 1); α=1, gap 1−0=1 (weight 3 accepted / 1 probed)
    assert m["refiner/a_prec"] == pytest.approx(weighted_cov([0, 1], [-1, 1], [1, 3]))
    assert m["refiner/a_prec"] > 0
    assert m["refiner/s_trim"] == pytest.approx(0.5) and m["refiner/s_trim_n"] == 2


def test_only_the_first_sampling_round_is_probed() -> None:
    def all_wrong(
        qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]:
        trajs = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
        for t in trajs:
            t.answer = "no"  # every group flat: dynamic sampling draws a top-up round
        return trajs

    probes: list[bool] = []
    inner = fake_refiner([10, 2])

    def refine(
        trajs: Sequence[Trajectory], *, seed: int, greedy: bool, probe: bool = True
    ) -> RefineOutcome:
        probes.append(probe)
        return replace(inner(trajs, seed=seed, greedy=greedy), probes_ran=probe)

    config = tiny_config(
        refiner={"enabled": True},
        algo={"kl_coef": 0.0, "dynamic_sampling": True, "max_sampling_rounds": 2},
    )
    trainer = Trainer(
        config, tiny_llama(), None, None, 0, all_wrong, em_reward, questions(12), refine=refine
    )
    metrics, _ = trainer.step()
    assert metrics["train/sampling_rounds"] == 2 and probes == [True, False]


def test_unprobed_round_counts_revisions_but_not_a_prec() -> None:
    decision = MetaDecision("m", [1], Segment("meta", "1", [1]), 1, 1, 0.5)
    orig = [_traj(0, 0), _traj(1, 1)]
    final = [_traj(1, 1), orig[1]]
    final[0].refinement = Refinement(True, 1, 0, 0.5, 1, [decision])
    final[1].refinement = Refinement(False, 0, 1, -0.5, 0, [decision])
    probed = RefineOutcome(final=final, originals=orig, accepted=1, probed=[1])
    probed.trims = {0: final[0], 1: _traj(0, 0)}
    probed.random_cuts = {0: _traj(0, 0), 1: _traj(0, 0)}
    top_up = RefineOutcome(final=[_traj(1, 1)], originals=[_traj(0, 0)], probes_ran=False)
    top_up.final[0].refinement = Refinement(True, 1, 0, 0.5, 1, [decision])
    top_up.trims = {0: top_up.final[0]}
    alone = refiner_metrics([probed])
    both = refiner_metrics([probed, top_up])
    assert both["refiner/revision_wrong_to_right"] == 2 and both["refiner/revision_rate"] == 2 / 3
    for key in ("refiner/a_prec", "refiner/a_prec_n", "refiner/s_trim", "refiner/s_trim_n"):
        assert both[key] == alone[key]


def test_config_rules() -> None:
    from searchrl.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape("refiner.joint: needs refiner.enabled")):
        tiny_config(refiner={"joint": True})
    with pytest.raises(ConfigError, match=re.escape("refiner.joint: needs a critic-free")):
        tiny_config(refiner={"enabled": True, "joint": True}, algo={"advantage": "gae"})
    with pytest.raises(ConfigError, match=re.escape("refiner.max_revisions: must be at least 1")):
        tiny_config(refiner={"max_revisions": 0})
    assert tiny_config(refiner={"enabled": True, "margin": -1.0}).refiner.margin == -1.0


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_meta_rows_weigh_inside_their_trajectory(
    monkeypatch: pytest.MonkeyPatch, aggregation: str
) -> None:
    """The paper averages a decision's 2 tokens together with its trajectory's (one augmented
    trajectory): a decision token weighs exactly what a token of its trajectory weighs, and
    the decisions do not take half the batch from the trajectories."""
    from searchrl.train import loop

    seen: dict[int, torch.Tensor] = {}
    original = loop.policy_micro_loss

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        inner = original(*args, **kwargs)

        def loss(micro: list[int], weights: torch.Tensor):  # type: ignore[no-untyped-def]
            for row, w in zip(micro, weights, strict=True):
                seen[row] = w.detach().clone()
            return inner(micro, weights)

        return loss

    monkeypatch.setattr(loop, "policy_micro_loss", spy)
    config = tiny_config(
        refiner={"enabled": True, "joint": True},
        algo={"kl_coef": 0.0, "loss_agg": aggregation},
    )
    trainer = Trainer(
        config, tiny_llama(), None, None, 0, scripted_rollout, em_reward, questions(),
        refine=fake_refiner([10, 2]),
    )  # fmt: skip
    trainer.step()
    n = len(seen) // 2  # trajectories, then one meta row each (parent = row − n)
    assert n == 8 and sorted(seen) == list(range(2 * n))
    for parent in range(n):
        own, meta = seen[parent], seen[n + parent]
        assert int((meta > 0).sum()) == 2
        assert meta[meta > 0].tolist() == pytest.approx([float(own[own > 0][0])] * 2)
    # two mini-batches, each normalised to 1: the trajectories keep most of it
    assert sum(float(w.sum()) for w in seen.values()) == pytest.approx(2.0)
    actor = sum(float(seen[r].sum()) for r in range(n)) / 2
    assert actor > 0.6  # not halved


def test_row_layout_works_for_any_aggregation() -> None:
    from searchrl.algo.losses import seq_mean_token_mean_weights
    from searchrl.train.joint import RowLayout

    mask = torch.tensor([[1.0, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]])
    layout = RowLayout.of(2, parents=[0, 1])
    weights = layout.weighting(seq_mean_token_mean_weights, mask)([0, 1, 2, 3])
    assert weights[0, :4].tolist() == pytest.approx([1 / 12] * 4)  # 6 tokens, 2 sequences
    assert weights[2, :2].tolist() == pytest.approx([1 / 12] * 2)
    assert weights[1, :2].tolist() == pytest.approx([1 / 8] * 2)  # 4 tokens
    assert float(weights.sum()) == pytest.approx(1.0)

    def constant_budget(m: torch.Tensor) -> torch.Tensor:  # each token 1 / (rows · C)
        return m / (m.shape[0] * 10.0)

    weights = layout.weighting(constant_budget, mask)([0, 1, 2, 3])
    assert weights[mask > 0].tolist() == pytest.approx([1 / 20] * 10)  # rows = trajectories
    plain = RowLayout.of(4)
    assert torch.equal(
        plain.weighting(constant_budget, mask)([0, 2]), constant_budget(mask[[0, 2]])
    )
    generator = torch.Generator().manual_seed(3)
    assert layout.minibatches(2, generator) in ([[0, 2], [1, 3]], [[1, 3], [0, 2]])


def test_a_prec_takes_the_first_trim_not_the_last() -> None:
    """Under N_max > 1 a revised trajectory may be trimmed again; J_trim(y) is the reward
    after trimming y once, so A_prec reads the first trim."""
    decision = MetaDecision("m", [1], Segment("meta", "1", [1]), 1, 1, 0.5)
    orig = [_traj(0, 0), _traj(1, 1)]
    first, last = _traj(0, 0), _traj(2, 1)  # the second revision made it right
    last.refinement = Refinement(True, 1, 0, 0.5, 2, [decision, decision])
    orig[1].refinement = Refinement(False, 0, 1, -0.5, 0, [decision])
    out = RefineOutcome(final=[last, orig[1]], originals=orig, accepted=1, probed=[1])
    out.trims = {0: first, 1: _traj(0, 0)}
    metrics = refiner_metrics([out])
    assert metrics["refiner/a_prec"] == pytest.approx(weighted_cov([0, 1], [0, 1], [1, 1]))
    assert metrics["refiner/v_inter"] == 0.5 and metrics["refiner/accept_rate"] == 0.5


def _sampled_with_logprobs(
    qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
) -> list[Trajectory]:
    """The scripted rollouts, each policy token with an engine log-prob (as vLLM returns)."""
    trajs = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
    for t in trajs:
        for segment in t.segments:
            if segment.role == "policy":
                segment.logprobs = [-1.5] * len(segment.token_ids)
    return trajs


def _tis_joint_step(
    monkeypatch: pytest.MonkeyPatch, every_row: bool
) -> tuple[list[list[int]], list[float]]:
    """One joint step under the engine correction, one mini-batch: the rows whose π_old got a
    forward pass (`every_row`: the old rule, each row of the batch) and the weights after."""
    from searchrl.train import loop
    from searchrl.train.logprobs import logprobs_of_rows

    computed: list[list[int]] = []

    def counting(model, batch, rows, *args):  # type: ignore[no-untyped-def]
        rows = list(range(batch.response_ids.shape[0])) if every_row else list(rows)
        computed.append(rows)
        return logprobs_of_rows(model, batch, rows, *args)

    monkeypatch.setattr(loop, "logprobs_of_rows", counting)
    config = tiny_config(
        batch_size=2, mini_batch_size=2, refiner={"enabled": True, "joint": True},
        algo={"behaviour_correction": "tis"},
    )  # fmt: skip
    torch.manual_seed(0)
    policy = prepare_policy(tiny_llama(), config.policy)
    trainer = Trainer(
        config, policy, None, frozen_reference(policy, lora=False), 0, _sampled_with_logprobs,
        em_reward, questions(), refine=fake_refiner([10, 2]),
    )  # fmt: skip
    metrics, _ = trainer.step()
    assert metrics["behaviour/logp_abs_diff_mean"] > 0  # the correction saw the engine rows
    return computed, [float(v.double().sum()) for v in policy.state_dict().values()]


def test_meta_rows_need_no_old_logprob_forward_under_the_engine_correction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A meta row has no engine log-probs (the trainer read its decision), so its importance
    weight is 1 whatever π_old is: in the first mini-batch the update's own detached log-prob
    is its π_old, and only the 4 sampled trajectories get an old-log-prob forward, not their 4
    decisions. The update is the one that recomputes every row."""
    fast, after_fast = _tis_joint_step(monkeypatch, every_row=False)
    slow, after_slow = _tis_joint_step(monkeypatch, every_row=True)
    assert fast == [[0, 1, 2, 3]] and slow == [list(range(8))]
    assert after_fast == pytest.approx(after_slow, rel=1e-6, abs=1e-6)
