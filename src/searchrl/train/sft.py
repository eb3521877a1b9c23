"""Supervised fine-tuning on trajectories: the cold-start warm start and the paper's SFT and
rejection-sampling baselines.

Reference trajectories are tokenized segment by segment (prompt, then each policy / env
segment on its own), exactly the way the rollout engine appends them, so the SFT model sees
the token boundaries it will meet in RL. Env tokens (retrieved passages) are masked out of the
loss as in RL: the model learns to write queries and answers, not to recite passages.

Search-R2 warm start: Meta-Refiner examples (`meta` answer tokens trained on like policy
tokens) come from `train.meta_sft`; `run_sft` takes per-example loss weights so a 2-token meta
answer can weigh like a whole reference.

Departure from the paper: Search-R1 starts RL from a base model without any warm start; a
135M model never emits the tags on its own (SPEC: EM 0.00), so here SFT on the world's
scripted reference trajectories comes first.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from searchrl.algo.losses import aggregate, token_mean_weights, training_mask
from searchrl.config.train import SFTConfig
from searchrl.data.world import Reference
from searchrl.rollout.sampler import encode_prompt, render_prompt
from searchrl.train.collate import collate
from searchrl.train.logprobs import autocast, forward_logprobs, to_device
from searchrl.train.models import make_optimizer, trainable, warmup_then_linear_decay
from searchrl.types import Question, Trajectory

LogFn = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class TokenizerLike:
    """What SFT needs from a HF tokenizer (kept explicit so tests can pass a fake)."""

    tokenizer: object

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]

    @property
    def eos_id(self) -> int | None:
        """The id that ends a turn in this tokenizer's chat format."""
        return getattr(self.tokenizer, "eos_token_id", None)


def reference_trajectory(
    reference: Reference, tokenizer: object, use_chat_template: bool
) -> Trajectory:
    """A world reference → a token-level trajectory, segment by segment, EOS after the answer
    so the model learns to stop."""
    tok = TokenizerLike(tokenizer)
    prompt = render_prompt(tokenizer, reference.question, use_chat_template)
    traj = Trajectory(
        id=reference.id,
        question=reference.question,
        golden_answers=list(reference.golden_answers),
        prompt=prompt,
        prompt_ids=encode_prompt(tokenizer, prompt, use_chat_template),
        uid=reference.id,
        answer=reference.answer,
    )
    for segment in reference.segments:
        traj.append(segment["role"], segment["text"], tok.encode(segment["text"]))  # type: ignore[arg-type]
    if tok.eos_id is not None and traj.segments and traj.segments[-1].role == "policy":
        traj.segments[-1].token_ids.append(tok.eos_id)
        traj.stats.policy_tokens += 1
    return traj


def solved_references(references: Sequence[Reference]) -> list[Reference]:
    """Only transcripts whose answer is right: SFT must not imitate the solver's failures."""
    return [r for r in references if r.em >= 1.0]


def rejection_sample(
    rollout: Callable[..., list[Trajectory]],
    questions: Sequence[Question],
    n_samples: int,
    seed: int,
) -> list[Trajectory]:
    """The paper's rejection-sampling baseline data: sample `n_samples` trajectories with
    search per question and keep the ones whose answer is exactly right."""
    sampled = rollout(questions, n_samples=n_samples, seed=seed, greedy=False)
    return [t for t in sampled if t.metrics.get("em", 0.0) >= 1.0]


def sft_step_count(n_examples: int, config: SFTConfig) -> int:
    """Optimizer steps for `config.epochs` passes (fractional epochs stop part-way)."""
    return max(1, math.ceil(n_examples * config.epochs / config.batch_size))


def _example_stream(n: int, seed: int) -> Callable[[int], list[int]]:
    """Indices in epoch-wise seeded shuffles; `take(k)` returns the next k."""
    state = {"epoch": 0, "order": [], "pos": 0}

    def take(k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if state["pos"] >= len(state["order"]):
                order = list(range(n))
                random.Random(seed * 7_907 + state["epoch"]).shuffle(order)
                state.update(epoch=state["epoch"] + 1, order=order, pos=0)
            out.append(state["order"][state["pos"]])
            state["pos"] += 1
        return out

    return take


def _length(traj: Trajectory) -> int:
    return len(traj.prompt_ids) + len(traj.response_ids)


def run_sft(
    policy: nn.Module,
    trajectories: Sequence[Trajectory],
    pad_id: int,
    config: SFTConfig,
    bf16: bool,
    log: LogFn | None = None,
    example_weights: Sequence[float] | None = None,
) -> list[dict[str, float]]:
    """Train `policy` in place on the trained tokens of `trajectories`; returns per-step stats
    (`sft/loss` = mean NLL per trained token, `sft/grad_norm`, `sft/lr`). With
    `example_weights`, example i's tokens count `example_weights[i]` times in the batch's
    token mean (1 each: the plain token mean)."""
    if not trajectories:
        raise ValueError("no trajectories to fine-tune on")
    device = next(policy.parameters()).device
    steps = sft_step_count(len(trajectories), config)
    optimizer = make_optimizer(policy, config.lr, 0.0)
    scheduler = warmup_then_linear_decay(optimizer, steps, config.warmup_ratio)
    take = _example_stream(len(trajectories), config.seed)
    history: list[dict[str, float]] = []
    policy.train()
    for step in range(steps):
        # longest first, so each micro-batch pads its rows to similar lengths
        picked = sorted(take(config.batch_size), key=lambda i: -_length(trajectories[i]))
        batch = collate([trajectories[i] for i in picked], pad_id, include_meta=True)
        mask = training_mask(batch.policy_mask, batch.response_mask, config.mask_env)
        if example_weights is not None:
            mask = mask * torch.tensor([float(example_weights[i]) for i in picked])[:, None]
        weights = token_mean_weights(mask)  # [B, R]
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for start in range(0, mask.shape[0], config.micro_batch_size):
            rows = list(range(start, min(start + config.micro_batch_size, mask.shape[0])))
            mb = batch.select(rows)
            w = weights[rows, : mb.response_length].to(device)
            with autocast(bf16, device):
                logp, _ = forward_logprobs(policy, to_device(mb, device), 1.0, "none", w > 0)
            loss = -aggregate(logp, w)
            loss.backward()
            total += float(loss.detach())
        limit = config.grad_clip if config.grad_clip > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(trainable(policy), limit))
        if math.isfinite(norm):
            optimizer.step()
        scheduler.step()
        stats = {"sft/loss": total, "sft/grad_norm": norm, "sft/lr": scheduler.get_last_lr()[0]}
        history.append(stats)
        if log is not None:
            log(step + 1, stats)
    policy.eval()
    return history
