"""Trainer: a step updates weights, resume is exact, NaN updates are skipped, env tokens get
no gradient through the whole update path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train import checkpoint as ckpt
from searchrl.train.loop import Trainer
from searchrl.train.models import Critic, frozen_reference, prepare_policy


def make_trainer(**overrides: object) -> Trainer:
    config = tiny_config(**overrides)
    policy = prepare_policy(tiny_llama(), config.policy)
    critic = Critic(policy) if config.uses_critic else None
    reference = frozen_reference(policy, lora=False)
    return Trainer(config, policy, critic, reference, 0, scripted_rollout, em_reward, questions())


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}


@pytest.mark.parametrize("advantage", ["grpo", "gae"])
def test_step_changes_weights_and_reports_metrics(advantage: str) -> None:
    algo = {"advantage": advantage, "kl_in_reward": advantage == "gae"}
    trainer = make_trainer(algo=algo)
    before = weights(trainer)
    metrics, trajectories = trainer.step()
    assert len(trajectories) == 8
    after = weights(trainer)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    for key in (
        "critic/score/mean",
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "timing_s/gen",
        "timing_s/update_actor",
        "state_tokens/coverage",
        "env/finish_ratio",
    ):
        assert key in metrics
    if advantage == "gae":
        assert "critic/vf_loss" in metrics
    else:
        assert "actor/kl_loss" in metrics


def test_resume_is_exact(tmp_path: Path) -> None:
    straight = make_trainer()
    for _ in range(3):
        straight.step()

    first = make_trainer()
    first.step()
    first.save(tmp_path)
    first.step()  # the work after the checkpoint is lost when the process is killed
    del first
    resumed = make_trainer()
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None
    resumed.restore(latest)
    assert resumed.step_count == 1
    resumed.step()
    resumed.step()
    a, b = weights(straight), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nan_gradient_skips_the_update() -> None:
    trainer = make_trainer()
    before = weights(trainer)
    first_param = next(trainer.policy.parameters())
    hook = first_param.register_hook(lambda g: torch.full_like(g, float("nan")))
    metrics, _ = trainer.step()
    hook.remove()
    assert metrics["actor/skipped_updates"] == 2.0
    after = weights(trainer)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_env_tokens_get_zero_gradient_through_the_update() -> None:
    trainer = make_trainer()
    trajectories = scripted_rollout(questions(2), n_samples=2, seed=0, greedy=False)
    trainer._score(trajectories)
    exp = trainer._advantages(trainer._experience(trajectories), trajectories)
    env = (exp.batch.response_mask == 1) & (exp.batch.policy_mask == 0)
    assert env.any()

    def grads(advantages: torch.Tensor) -> list[torch.Tensor]:

        from searchrl.train.update import policy_micro_loss

        trainer.policy.zero_grad()
        loss_fn = policy_micro_loss(
            trainer.policy, replace(exp, advantages=advantages), trainer.settings, trainer.kl_loss
        )
        rows = list(range(exp.batch.input_ids.shape[0]))
        loss, _ = loss_fn(rows, trainer.weights(exp.mask))
        loss.backward()
        return [p.grad.clone() for p in trainer.policy.parameters() if p.grad is not None]

    base = grads(exp.advantages)
    perturbed = exp.advantages.clone()
    perturbed[env] = 1e4
    for g0, g1 in zip(base, grads(perturbed), strict=True):
        assert torch.equal(g0, g1)


def test_lora_trains_only_adapters_and_uses_base_as_reference() -> None:
    config = tiny_config(policy={"autocast": "fp32", "lora_rank": 4})
    policy = prepare_policy(tiny_llama(), config.policy)
    assert frozen_reference(policy, lora=True) is None
    trainer = Trainer(config, policy, None, None, 0, scripted_rollout, em_reward, questions())
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    metrics, _ = trainer.step()
    changed = {n for n, p in policy.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all("lora_" in n for n in changed)
    assert metrics["actor/kl_loss"] >= 0.0


def test_gradient_checkpointing_gives_the_same_update() -> None:
    plain = make_trainer()
    plain.step()
    checkpointed = make_trainer(policy={"autocast": "fp32", "gradient_checkpointing": True})
    checkpointed.step()
    a, b = weights(plain), weights(checkpointed)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.parametrize("mini_batch_size", [2, 1])
def test_first_minibatch_shortcut_matches_recomputed_old_logprobs(
    mini_batch_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One mini-batch: no old-log-prob forward at all; two: only the second one's rows get
    it (the first meets unchanged weights), and the update is the one a full recomputation
    gives. The engine is pinned to the trainer's fp32: on a CPU with fast bf16 the default
    engine samples in bf16, and then every row's π_old is recomputed for the correction."""
    from searchrl.train import loop

    computed: list[list[int]] = []
    real = loop.logprobs_of_rows

    def counting(model, batch, rows, *args):  # type: ignore[no-untyped-def]
        computed.append(list(rows))
        return real(model, batch, rows, *args)

    monkeypatch.setattr(loop, "logprobs_of_rows", counting)
    fp32_engine = {"backend": "hf", "generation_dtype": "float32"}
    fast = make_trainer(batch_size=2, mini_batch_size=mini_batch_size, model=fp32_engine)
    fast.step()
    rows = 2 * fast.config.n_samples
    first = set(fast._current_rows(rows))  # the step counter moved: the next step's split
    assert len(computed) == 1 and len(computed[0]) == rows - rows // (2 // mini_batch_size)
    slow = make_trainer(batch_size=2, mini_batch_size=mini_batch_size, model=fp32_engine)
    monkeypatch.setattr(slow, "_current_rows", lambda rows: frozenset())
    slow.step()
    assert len(computed) == 2 and len(computed[1]) == rows
    a, b = weights(fast), weights(slow)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert len(first) == rows // (2 // mini_batch_size)


def test_lora_weights_reach_the_generation_backend() -> None:
    from types import SimpleNamespace

    from searchrl.models.hf_backend import HFBackend
    from searchrl.train.environment import sync_generation_weights
    from searchrl.train.models import merged_for_export

    policy = prepare_policy(tiny_llama(), tiny_config(policy={"lora_rank": 4}).policy)
    tokenizer = SimpleNamespace(eos_token_id=1, pad_token_id=0, decode=lambda ids, **_: "")
    backend = HFBackend(merged_for_export(policy), tokenizer, max_batch_size=2)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.add_(0.5)
    sync_generation_weights(backend, policy)
    expected = merged_for_export(policy).state_dict()
    got = backend.model.state_dict()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_a_backend_sharing_the_policy_leaves_it_training_and_checkpointing() -> None:
    """The HF backend generating with the live policy used to switch it to eval mode for
    good, so updates ran in eval mode and gradient checkpointing silently stopped."""
    from types import SimpleNamespace

    from searchrl.models.generation import SamplingParams
    from searchrl.models.hf_backend import HFBackend

    trainer = make_trainer(policy={"autocast": "fp32", "gradient_checkpointing": True})
    tokenizer = SimpleNamespace(eos_token_id=1, pad_token_id=0, decode=lambda ids, **_: "")
    backend = HFBackend(trainer.policy, tokenizer, max_batch_size=2)
    assert trainer.policy.training
    backend.generate([[5, 6, 7]], [SamplingParams(max_new_tokens=2, temperature=0.0)])
    assert trainer.policy.training

    calls = [0]
    for layer in trainer.policy.model.layers:
        checkpoint = layer._gradient_checkpointing_func

        def counted(*args: object, _inner=checkpoint, **kwargs: object) -> object:
            calls[0] += 1
            return _inner(*args, **kwargs)

        layer._gradient_checkpointing_func = counted
    trainer.step()
    # every layer of every update micro-batch (2 mini-batches x 2 micro-batches) checkpointed
    assert calls[0] == 4 * len(trainer.policy.model.layers)
    assert trainer.policy.training


def test_ppo_with_lora_trains_adapters_and_a_full_critic() -> None:
    """The critic used to take peft's wrapper (a whole CausalLM) as its backbone and crash."""
    config = tiny_config(
        policy={"autocast": "fp32", "lora_rank": 4}, algo={"advantage": "gae", "kl_in_reward": True}
    )
    policy = prepare_policy(tiny_llama(), config.policy)
    critic = Critic(policy)
    assert not any("lora_" in n for n, _ in critic.named_parameters())
    trainer = Trainer(config, policy, critic, None, 0, scripted_rollout, em_reward, questions())
    critic_before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    metrics, _ = trainer.step()
    assert "critic/vf_loss" in metrics
    assert any(not torch.equal(critic_before[n], p) for n, p in critic.named_parameters())


def test_train_layers_freezes_everything_below_the_top_layers() -> None:
    trainer = make_trainer(policy={"autocast": "fp32", "train_layers": 1})
    policy = trainer.policy
    trained = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith(("model.layers.1.", "model.norm.")) for n in trained)
    before = weights(trainer)
    trainer.step()
    after = weights(trainer)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith(("model.layers.1.", "model.norm.")) for k in changed)


def test_lora_with_train_layers_adapts_only_the_top_layers() -> None:
    trainer = make_trainer(policy={"autocast": "fp32", "train_layers": 1, "lora_rank": 4})
    trained = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert trained and all(".layers.1." in n and "lora_" in n for n in trained)
    before = weights(trainer)
    trainer.step()
    after = weights(trainer)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(".layers.1." in k and "lora_" in k for k in changed)


def test_train_layers_beyond_the_model_trains_every_layer() -> None:
    trainer = make_trainer(policy={"autocast": "fp32", "train_layers": 10})  # 2 layers
    assert all(p.requires_grad for p in trainer.policy.parameters())


def engine_rollout(behaviour: float):  # type: ignore[no-untyped-def]
    """The scripted rollout with every policy token's engine log-prob set to `behaviour`."""

    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        trajectories = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
        for traj in trajectories:
            for segment in traj.segments:
                if segment.role == "policy":
                    segment.logprobs = [behaviour] * len(segment.token_ids)
        return trajectories

    return rollout


def test_engine_mismatch_is_corrected_and_logged() -> None:
    """An engine at another precision (a bf16 copy) samples from another distribution: the
    trainer recomputes the old log-probs even on-policy, weights tokens by min(π_old/μ, C) and
    logs the gap."""
    behaviour = -3.0
    rollout = engine_rollout(behaviour)

    engine = {"backend": "hf", "generation_dtype": "bfloat16"}
    config = tiny_config(batch_size=2, mini_batch_size=2, model=engine)
    policy = prepare_policy(tiny_llama(), config.policy)
    trainer = Trainer(config, policy, None, frozen_reference(policy, False), 0, rollout,
                      em_reward, questions())  # fmt: skip
    assert trainer.correct_behaviour
    trajectories = rollout(trainer.sampler.next_batch(2), n_samples=2, seed=0, greedy=False)
    exp = trainer._experience(trajectories)
    assert exp.tis_weight is not None and not torch.equal(
        exp.old_logp, torch.zeros_like(exp.old_logp)
    )
    trained = exp.mask > 0
    gap = (exp.old_logp - behaviour)[trained]
    assert exp.mismatch["behaviour/logp_abs_diff_mean"] == pytest.approx(float(gap.abs().mean()))
    capped = torch.exp(gap).clamp(max=config.algo.tis_cap)
    assert torch.allclose(exp.tis_weight[trained], capped)
    metrics, _ = trainer.step()
    assert {"behaviour/logp_abs_diff_max", "behaviour/capped_share"} <= set(metrics)
    exact = make_trainer(
        batch_size=2, mini_batch_size=2, model={"backend": "hf", "generation_dtype": "float32"}
    )
    assert not exact.correct_behaviour


def test_an_exact_engine_is_not_corrected_but_its_gap_is_logged() -> None:
    """An engine taken as exact (HF in fp32) had its gap to the trainer never measured,
    although π_old was computed for the second mini-batch anyway."""
    behaviour = -3.0
    rollout = engine_rollout(behaviour)

    config = tiny_config(
        batch_size=2, mini_batch_size=1, model={"backend": "hf", "generation_dtype": "float32"}
    )
    policy = prepare_policy(tiny_llama(), config.policy)
    trainer = Trainer(config, policy, None, frozen_reference(policy, False), 0, rollout,
                      em_reward, questions())  # fmt: skip
    assert not trainer.correct_behaviour
    exp = trainer._experience(rollout(trainer.sampler.next_batch(2), n_samples=2, seed=0,
                                      greedy=False))  # fmt: skip
    assert exp.tis_weight is None
    gap = (exp.old_logp - behaviour)[exp.mask > 0]
    assert exp.mismatch["behaviour/logp_abs_diff_mean"] == pytest.approx(float(gap.abs().mean()))
