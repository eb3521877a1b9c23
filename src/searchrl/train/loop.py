"""The RL training step as a named pipeline, one timer per stage:

    sample prompts → rollouts (n per prompt) → [refine] → rewards → old & ref log-probs
    (+ values) → advantages → critic and policy mini-batch updates over `ppo_epochs` → metrics

With a Meta-Refiner (Search-R2), the GRPO groups are the refined trajectories; under
`refiner.joint` each refiner decision joins the batch as an extra row (meta prompt + decision,
loss on the decision tokens) carrying its trajectory's advantage.

In a one-epoch update without the KL in the reward, the first mini-batch meets weights no
update has changed yet: its π_old is the detached log-prob of its own forward (ratio exactly 1),
so only the other mini-batches' old log-probs are computed before the update (none with one
mini-batch); an engine/trainer mismatch needs them for every row.

The sampling rounds (dynamic sampling, refinement, scoring) live in `train.collect`. The
trainer knows nothing about models' origins, retrievers or worlds: it receives a rollout
function and the networks (see `train.run` for the wiring). Under `accelerate launch` each
process samples its own slice of the prompts and rolls them out; DDP averages the gradients, so
every rank holds the same weights after each update. GRPO groups never straddle ranks (all
samples of a prompt are drawn on one rank).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from searchrl.algo.advantages import AdvantageInputs, make_estimator
from searchrl.algo.behaviour import behaviour_logprobs, truncated_importance_weights
from searchrl.algo.losses import kl_penalized_rewards, make_kl, make_loss_weights, training_mask
from searchrl.config.train import TrainConfig
from searchrl.models.loading import engine_matches_trainer
from searchrl.reward.outcome import RewardFn
from searchrl.reward.scoring import score_batch
from searchrl.train.collate import collate
from searchrl.train.collect import Collector
from searchrl.train.joint import RowLayout, joint_rows
from searchrl.train.logprobs import batched_logprobs, batched_values, logprobs_of_rows
from searchrl.train.metrics import (
    StageTimer,
    advantage_length_metrics,
    eval_metrics,
    rollout_metrics,
)
from searchrl.train.models import (
    evaluating,
    make_optimizer,
    reference_context,
    trainable,
    training,
    use_bf16,
    warmup_then_constant,
)
from searchrl.train.ports import Distributed, RefineFn, RolloutFn
from searchrl.train.sampling import PromptSampler, hop_weights
from searchrl.train.signal import SignalMeter
from searchrl.train.trainer_state import restore_trainer, save_trainer, trainer_state
from searchrl.train.update import (
    Experience,
    MicroLoss,
    UpdateSettings,
    critic_micro_loss,
    optimize,
    policy_micro_loss,
)
from searchrl.types import Question, Trajectory


class Trainer:
    """Owns networks, optimizers, sampler and step counter; `step()` runs one RL step."""

    def __init__(
        self,
        config: TrainConfig,
        policy: nn.Module,
        critic: nn.Module | None,
        reference: nn.Module | None,
        pad_id: int,
        rollout: RolloutFn,
        reward: RewardFn,
        questions: Sequence[Question],
        dist: Distributed | None = None,
        refine: RefineFn | None = None,
        probe_questions: Sequence[Question] = (),
    ) -> None:
        self.config = config
        self.refine = refine
        self.dist = dist or Distributed()
        self.policy, self.critic, self.reference = policy, critic, reference
        self.model = self.dist.wrap(policy)
        self.critic_model = self.dist.wrap(critic) if critic is not None else None
        if self.dist.sharded and reference is not None:
            self.reference = self.dist.wrap(reference)
        self.pad_id, self.rollout, self.reward = pad_id, rollout, reward
        weights = hop_weights(questions, config.data.train_hop_weights)
        self.sampler = PromptSampler(questions, config.seed, weights=weights)
        self.hops = {q.uid: q.hops for q in [*questions, *probe_questions]}
        self.collector = Collector(
            config, self.sampler, rollout, self._score, self.dist, policy, refine
        )
        self.step_count = 0
        self.on_stage: Callable[[str], None] | None = None
        """Told the name of each stage of a step as it starts (progress display)."""
        self.collected: Callable[[], None] | None = None
        """Called once a step's rollouts are collected, before its update (`train.overlap`)."""
        algo, optim = config.algo, config.optim
        self.estimator = make_estimator(
            algo.advantage,
            gamma=algo.gamma,
            lam=algo.lam,
            scale_by_std=algo.scale_by_std,
            eps=algo.adv_eps,
            whiten=algo.whiten_advantages,
        )
        self.weights = make_loss_weights(algo.loss_agg, config.loss_norm_tokens)
        self.layout = RowLayout.of(0)
        """This step's rows: meta rows are weighed inside their trajectory (`train.joint`)."""
        self.kl_loss = (
            None if algo.kl_in_reward or algo.kl_coef == 0 else make_kl(algo.kl_estimator)
        )
        self.optimizer = make_optimizer(policy, optim.lr, optim.weight_decay)
        self.scheduler = warmup_then_constant(self.optimizer, config.steps, optim.warmup_ratio)
        self.critic_optimizer = None
        self.critic_scheduler = None
        if critic is not None:
            self.critic_optimizer = make_optimizer(critic, optim.critic_lr, optim.weight_decay)
            self.critic_scheduler = warmup_then_constant(
                self.critic_optimizer, config.steps, optim.critic_warmup_ratio
            )
        correction = config.algo.behaviour_correction
        self.correct_behaviour = correction == "tis" or (
            correction == "auto"
            and (config.overlap.enabled or not engine_matches_trainer(config.model))
        )
        """Reweight by π_old/μ: the engine samples at another precision than the trainer."""
        self.settings = UpdateSettings(
            micro_batch_size=config.micro_batch_size,
            micro_batch_tokens=config.micro_batch_tokens,
            grad_clip=optim.grad_clip,
            bf16=use_bf16(config.policy.autocast, policy),
            temperature=max(config.rollout.temperature, 1e-6),
            clip_eps=algo.clip_eps,
            kl_coef=algo.kl_coef,
            entropy_coef=algo.entropy_coef,
            value_clip=algo.value_clip,
        )
        self.meter = SignalMeter.for_run(
            config, policy, probe_questions, pad_id, self.settings.bf16, self.settings.temperature
        )
        """The learning signal (`train.signal`): informative groups, distance moved, probe."""

    # ---- the pipeline -------------------------------------------------------------------
    def step(self) -> tuple[dict[str, float], list[Trajectory]]:
        """One RL step; returns its metrics and every trajectory sampled for it."""
        timer = StageTimer(self.on_stage)
        cpu = time.process_time()
        with timer("step"):
            sampled, trained, counts = self.collector.collect(self.step_count, timer)
            if self.collected is not None:  # overlap: the next step's rollouts start now
                self.collected()
            stats: dict[str, float] = {}
            if trained:
                refiner, seed = self.config.refiner, self.config.seed * 7_919 + self.step_count
                meta, parents, self.layout = joint_rows(
                    trained, refiner.joint, refiner.joint_share, torch.Generator().manual_seed(seed)
                )
                with timer("ref"):
                    exp = self._experience([*trained, *meta])
                with timer("adv"):
                    exp = self._advantages(exp, trained, parents)
                stats.update(advantage_length_metrics(exp.advantages, exp.mask, len(trained)))
                stats.update(
                    exp.mismatch, **{"refiner/meta_rows_trained": len(meta)} if meta else {}
                )
                if self.critic is not None:
                    with timer("update_critic"):
                        stats.update(self._update_critic(exp))
                with timer("update_actor"):
                    stats.update(self._update_policy(exp))
            else:
                self._skip_update()
        self.step_count += 1
        metrics = {**rollout_metrics(sampled, self.hops), **counts, **stats, **timer.metrics()}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        tokens = float(sum(len(t.prompt_ids) + len(t.response_ids) for t in trained))
        metrics["perf/tokens_per_s"] = tokens / max(timer.seconds["step"], 1e-9)
        metrics["train/epoch"] = float(self.sampler.epoch)
        cpu = time.process_time() - cpu  # this process: the trainer and an in-process engine
        metrics.update(self.meter.after_step(counts, len(trained), timer.seconds["step"], cpu))
        if self.refine is not None:
            step_s = max(timer.seconds["step"], 1e-9)
            metrics["refiner/seconds_share"] = metrics["refiner/refine_s"] / step_s
            metrics["refiner/probe_seconds_share"] = metrics["refiner/probe_s"] / step_s
        return metrics, sampled

    def _skip_update(self) -> None:
        """No usable group this step: no gradient, but the schedules still advance. (Torch
        warns when a schedule steps before its optimizer ever has; here that is the intent.)"""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()
            if self.critic_scheduler is not None:
                self.critic_scheduler.step()

    def _score(self, trajectories: Sequence[Trajectory]) -> None:
        """Reward breakdowns for a round's trajectories, all in one call so a batch reward
        (Search-R2's hybrid) can judge the whole round's searches together."""
        for traj, breakdown in zip(
            trajectories, score_batch(self.reward, trajectories), strict=True
        ):
            traj.reward = breakdown

    def _experience(self, trajectories: Sequence[Trajectory]) -> Experience:
        """Collate (meta rows train on their `meta` decision tokens), then old and reference
        log-probs (and old values) before any update. Under an engine/trainer mismatch the
        rows the engine sampled always get π_old, for the truncated importance weights; a row
        without engine log-probs (a meta row) has weight 1 and, as without a mismatch, needs no
        π_old forward in the first mini-batch."""
        batch = collate(trajectories, self.pad_id, include_meta=True)
        mask = training_mask(batch.policy_mask, batch.response_mask, self.config.algo.mask_env)
        micro, bf16, temp, tokens = (
            self.settings.micro_batch_size,
            self.settings.bf16,
            self.settings.temperature,
            self.settings.micro_batch_tokens,
        )
        current = self._current_rows(len(trajectories))
        behaviour = behaviour_logprobs(trajectories, batch.response_length)  # [B, R], NaN unknown
        sampled = ((mask > 0) & ~behaviour.isnan()).any(-1).tolist()  # rows the engine sampled
        recheck = [self.correct_behaviour and engine for engine in sampled]
        needed = [r for r in range(len(trajectories)) if recheck[r] or r not in current]
        with evaluating(self.policy):
            old_logp = logprobs_of_rows(self.policy, batch, needed, micro, temp, bf16, mask, tokens)
            ref_logp = None
            if self.config.algo.kl_coef > 0:
                ref_model, context = reference_context(self.policy, self.reference)
                with context:  # type: ignore[attr-defined]
                    ref_logp = batched_logprobs(ref_model, batch, micro, temp, bf16, mask, tokens)
        old_values = None
        if self.critic is not None:
            with evaluating(self.critic):
                old_values = batched_values(self.critic, batch, micro, bf16)
        zeros = torch.zeros_like(old_logp)
        tis_weight, mismatch = None, {}
        if needed:  # the gap is logged whenever π_old was computed; applied only when correcting
            computed = torch.zeros(len(trajectories), 1)
            computed[needed] = 1.0
            weights, mismatch = truncated_importance_weights(
                old_logp, behaviour, mask * computed, self.config.algo.tis_cap
            )
            tis_weight = weights if self.correct_behaviour else None
        return Experience(
            batch, mask, old_logp, zeros, ref_logp, None, old_values, tis_weight, mismatch, current
        )

    def _current_rows(self, rows: int) -> frozenset[int]:
        """Rows whose π_old is the update's own detached log-prob: the first mini-batch of a
        one-epoch update meets weights no update has changed yet (every row when there is one
        mini-batch), so their old log-probs need no forward pass of their own (a fifth of a
        CPU step with two mini-batches). Not with the KL in the reward, which needs them."""
        if self.config.ppo_epochs != 1 or self.config.algo.kl_in_reward:
            return frozenset()
        if len(self.layout.owner) != rows or rows == 0:  # rows this step's layout does not know
            return frozenset()
        return frozenset(self._groups(0, 0)[0])

    def _advantages(
        self, exp: Experience, trajectories: Sequence[Trajectory], parents: Sequence[int] = ()
    ) -> Experience:
        """Token rewards (−β·KL in the reward for PPO), then the configured estimator over the
        trajectories' rows; the meta rows after them (`parents[j]` = the trajectory of meta
        row j) get their trajectory's sequence advantage on their decision tokens."""
        algo = self.config.algo
        n = len(trajectories)
        scores = torch.tensor([t.reward["score"] for t in trajectories], dtype=torch.float32)
        kl_coef = algo.kl_coef if algo.kl_in_reward and exp.ref_logp is not None else 0.0
        ref = exp.ref_logp if exp.ref_logp is not None else exp.old_logp
        mask = exp.mask[:n]
        token_rewards = kl_penalized_rewards(scores, exp.old_logp[:n], ref[:n], mask, kl_coef)
        inputs = AdvantageInputs(
            scores=scores,
            token_rewards=token_rewards,
            mask=mask,
            group_ids=[t.uid or t.question for t in trajectories],
            values=exp.old_values,
        )
        advantages, returns = self.estimator(inputs)
        if parents:
            per_row = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [n]
            meta = per_row[list(parents)][:, None] * exp.mask[n:]  # [m, R]
            advantages = torch.cat([advantages, meta])
        return dataclasses.replace(exp, advantages=advantages, returns=returns)

    def _groups(self, epoch: int, salt: int) -> list[list[int]]:
        cfg = self.config
        generator = torch.Generator().manual_seed(
            ((cfg.seed * 7_919 + self.step_count) * 31 + epoch) * 2 + salt
        )
        return self.layout.minibatches(max(cfg.batch_size // cfg.mini_batch_size, 1), generator)

    def _update_policy(self, exp: Experience) -> dict[str, float]:
        loss = policy_micro_loss(self.model, exp, self.settings, self.kl_loss)
        with training(self.policy):
            stats = self._optimize(self.policy, self.optimizer, exp, loss, "actor", salt=0)
        self.scheduler.step()
        return stats

    def _update_critic(self, exp: Experience) -> dict[str, float]:
        assert self.critic_model is not None and self.critic_optimizer is not None
        assert self.critic is not None and self.critic_scheduler is not None
        loss = critic_micro_loss(self.critic_model, exp, self.settings)
        with training(self.critic):
            stats = self._optimize(
                self.critic_model, self.critic_optimizer, exp, loss, "critic", salt=1
            )
        self.critic_scheduler.step()
        return stats

    def _optimize(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        exp: Experience,
        loss: MicroLoss,
        prefix: str,
        salt: int,
    ) -> dict[str, float]:
        """`ppo_epochs` passes over seeded mini-batches of the experience."""
        stats: dict[str, float] = {}
        for epoch in range(self.config.ppo_epochs):
            stats = optimize(
                trainable(module),
                optimizer,
                self._groups(epoch, salt),
                self.layout.weighting(self.weights, exp.mask),
                self.settings.micro_batch_size,
                self.settings.grad_clip,
                loss,
                prefix,
                exp.batch.attention_mask.sum(1),
                self.settings.micro_batch_tokens,
            )
        return stats

    # ---- evaluation and checkpoints -----------------------------------------------------
    def evaluate(self, questions: Sequence[Question]) -> tuple[dict[str, float], list[Trajectory]]:
        """Greedy rollouts on held-out questions: `val/test_score/<source>` and friends."""
        with evaluating(self.policy):
            trajectories = self.rollout(questions, n_samples=1, seed=self.config.seed, greedy=True)
        self._score(trajectories)
        sources = {q.uid: q.source for q in questions}
        return eval_metrics(trajectories, sources), trajectories

    def state(self) -> dict[str, Any]:
        """Everything an exact resume needs (`train.trainer_state`)."""
        return trainer_state(self)

    def save(self, root: Path) -> Path:
        """Atomically write a checkpoint of the current step (sharded: every rank calls it)."""
        return save_trainer(self, root)

    def restore(self, path: Path) -> None:
        """Load a checkpoint written by `save`: weights, optimizers, schedules, RNG, data."""
        restore_trainer(self, path)
