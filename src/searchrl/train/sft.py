"""Supervised fine-tuning on trajectories: the cold-start warm start and the paper's SFT and
rejection-sampling baselines.

Reference trajectories are tokenized segment by segment (prompt, then each policy / env
segment on its own), exactly the way the rollout engine appends them, so the SFT model sees
the token boundaries it will meet in RL. Env tokens (retrieved passages) are masked out of the
loss as in RL: the model learns to write queries and answers, not to recite passages.

The Direct and RAG baselines get the same training budget (`source=direct|rag`): the same
solved references, turned into (question → `<answer> X </answer>`) and (question + its top-k
passages → `<answer> X </answer>`) in exactly the prompts `searchrl eval --method direct-ft |
rag-ft` shows, so a comparison with the search policy is one of methods, not of who learned
the answer format.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from searchrl.algo.losses import aggregate, token_mean_weights, training_mask
from searchrl.config.sft import SFTConfig
from searchrl.data.templates import direct_prompt, rag_prompt, render_chat
from searchrl.data.world import Reference
from searchrl.retrieval.base import Retriever
from searchrl.rollout.rows import observation_ids
from searchrl.rollout.sampler import encode_prompt, render_prompt
from searchrl.train.collate import collate
from searchrl.train.logprobs import autocast, forward_logprobs, to_device
from searchrl.train.models import make_optimizer, trainable, warmup_then_linear_decay
from searchrl.train.packing import micro_batches
from searchrl.train.sft_checkpoint import PhaseCheckpoints
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
    reference: Reference,
    tokenizer: object,
    use_chat_template: bool,
    template: str = "search-r1",
    max_obs_tokens: int | None = None,
) -> Trajectory:
    """A reference transcript → a token-level trajectory, segment by segment, EOS after the
    answer so the model learns to stop; the prompt is `template`'s, and with
    `max_obs_tokens` every `<information>` block is cut as the rollout cuts it."""
    tok = TokenizerLike(tokenizer)
    prompt = render_prompt(tokenizer, reference.question, use_chat_template, template=template)
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
        text, ids = segment["text"], tok.encode(segment["text"])
        if segment["role"] == "env" and max_obs_tokens is not None:
            ids, cut = observation_ids(tokenizer, text, max_obs_tokens)
            text = tokenizer.decode(ids, skip_special_tokens=False) if cut else text  # type: ignore[attr-defined]
        traj.append(segment["role"], text, ids)  # type: ignore[arg-type]
    if tok.eos_id is not None and traj.segments and traj.segments[-1].role == "policy":
        traj.segments[-1].token_ids.append(tok.eos_id)
        traj.stats.policy_tokens += 1
    return traj


def observation_view(tokenizer: object, max_obs_tokens: int) -> Callable[[str], str]:
    """What the policy is shown of an `<information>` block under the rollout's budget:
    grounded references keep only answers that survive the cut."""

    def view(text: str) -> str:
        ids, cut = observation_ids(tokenizer, text, max_obs_tokens)
        return tokenizer.decode(ids, skip_special_tokens=False) if cut else text  # type: ignore[attr-defined]

    return view


def answer_trajectory(
    uid: str, question: str, golden: Sequence[str], text: str, answer: str,
    tokenizer: object, use_chat_template: bool,
) -> Trajectory:  # fmt: skip
    """A one-turn example: prompt `text` (in the chat template when asked) → `<answer> X
    </answer>` and EOS, built the way `eval.methods.start_trajectory` builds the prompt."""
    tok = TokenizerLike(tokenizer)
    prompt = render_chat(tokenizer, text) if use_chat_template else text  # type: ignore[arg-type]
    traj = Trajectory(
        id=uid,
        question=question,
        golden_answers=list(golden),
        prompt=prompt,
        prompt_ids=encode_prompt(tokenizer, prompt, use_chat_template),
        uid=uid,
        answer=answer,
    )
    reply = f"<answer> {answer} </answer>"
    ids = tok.encode(reply) + ([tok.eos_id] if tok.eos_id is not None else [])
    traj.append("policy", reply, ids)
    return traj


def baseline_examples(
    references: Sequence[Reference],
    source: str,
    tokenizer: object,
    use_chat_template: bool,
    retriever: Retriever | None,
    topk: int,
) -> list[Trajectory]:
    """The Direct (`source="direct"`) or RAG (`"rag"`) baseline's fine-tuning examples from
    reference transcripts: their question and answer in the baseline's own prompt; RAG's
    passages are the top-k for the question, one batched search."""
    if source == "rag":
        if retriever is None:
            raise ValueError("source=rag needs a retriever for the passages")
        hits = retriever.search([r.question for r in references], topk)
        texts = [
            rag_prompt(r.question, [h.document.contents for h in found[:topk]])
            for r, found in zip(references, hits, strict=True)
        ]
    else:
        texts = [direct_prompt(r.question) for r in references]
    return [
        answer_trajectory(
            r.id, r.question, r.golden_answers, text, r.answer, tokenizer, use_chat_template
        )
        for r, text in zip(references, texts, strict=True)
    ]


def answer_token_weights(traj: Trajectory, tokenizer: object, weight: float) -> list[float]:
    """One loss weight per response token: `weight` on the answer's tokens (from `<answer>`
    in the last policy segment to its end, or the whole segment when the engine opened the
    answer before it), 1 elsewhere (masked tokens included: the mask zeroes them)."""
    weights = [1.0] * len(traj.response_ids)
    if weight == 1.0 or not traj.segments or traj.segments[-1].role != "policy":
        return weights
    ids = traj.segments[-1].token_ids
    decode = tokenizer.decode  # type: ignore[attr-defined]
    start = next((k for k in range(len(ids) - 1, -1, -1) if "<answer>" in decode(ids[k:])), None)
    if start is None:
        opened = len(traj.segments) > 1 and traj.segments[-2].text.rstrip().endswith("<answer>")
        start = 0 if opened else len(ids)
    first = len(weights) - len(ids) + start
    weights[first:] = [weight] * (len(weights) - first)
    return weights


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


def example_weight_tensor(n: int, example_weights: Sequence[float] | None) -> torch.Tensor:
    """Per-example loss weights as a tensor [n] (all 1 when None), checked once."""
    if example_weights is None:
        return torch.ones(n)
    weights = torch.as_tensor(list(example_weights), dtype=torch.float32)
    if weights.shape != (n,):
        raise ValueError(f"{weights.numel()} example weights for {n} trajectories")
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("example weights must be finite and >= 0")
    return weights


def _token_weight_tensor(
    token_weights: Sequence[Sequence[float]], picked: Sequence[int], width: int
) -> torch.Tensor:
    """[len(picked), width] from per-trajectory token weights (1 past a row's end)."""
    out = torch.ones(len(picked), width)
    for row, i in enumerate(picked):
        values = torch.as_tensor(list(token_weights[i][:width]), dtype=torch.float32)
        out[row, : values.numel()] = values
    return out


def _update(
    policy: nn.Module,
    batch: Any,
    weights: torch.Tensor,
    config: SFTConfig,
    bf16: bool,
    optimizer: torch.optim.Optimizer,
) -> tuple[float, float]:
    """One optimizer step over a batch in micro-batches; the summed loss and the gradient
    norm (a non-finite norm skips the step)."""
    device = next(policy.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    lengths = batch.attention_mask.sum(1).tolist()
    for rows in micro_batches(lengths, config.micro_batch_size, config.micro_batch_tokens):
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
    return total, norm


def run_sft(
    policy: nn.Module,
    trajectories: Sequence[Trajectory],
    pad_id: int,
    config: SFTConfig,
    bf16: bool,
    log: LogFn | None = None,
    example_weights: Sequence[float] | None = None,
    checkpoints: PhaseCheckpoints | None = None,
    token_weights: Sequence[Sequence[float]] | None = None,
) -> list[dict[str, float]]:
    """Train `policy` in place on the trained tokens of `trajectories`; returns per-step stats
    (`sft/loss` = mean NLL per trained token, `sft/grad_norm`, `sft/lr`, and throughput since
    the start: `sft/tokens_per_s` counts every token forwarded and back-propagated, prompt and
    passages included; `sft/loss_tokens_per_s` only those in the loss).

    `example_weights` (one per trajectory, default 1) make the loss a weighted token mean:
    a token of example i weighs w_i / Σ w over the batch's trained tokens, so e.g. Meta-Refiner
    examples can count more or less than the Actor's without changing the batch.

    `checkpoints`: save there every few steps, and first continue from the newest checkpoint
    found there (a finished phase returns its stats at once, its weights restored).

    `token_weights` (one list per trajectory, one weight per response token; e.g.
    `answer_token_weights`) multiply the tokens' shares of that mean."""
    if not trajectories:
        raise ValueError("no trajectories to fine-tune on")
    per_example = example_weight_tensor(len(trajectories), example_weights)
    steps = sft_step_count(len(trajectories), config)
    optimizer = make_optimizer(policy, config.lr, 0.0)
    scheduler = warmup_then_linear_decay(optimizer, steps, config.warmup_ratio)
    take = _example_stream(len(trajectories), config.seed)
    history: list[dict[str, float]] = []
    seconds = tokens = loss_tokens = 0.0
    first = 0
    resumed = checkpoints.restore(policy, optimizer, scheduler) if checkpoints else None
    if resumed is not None:
        first, history = resumed["step"], resumed["history"]
        seconds, tokens, loss_tokens = resumed["counters"]
        for _ in range(first):  # the examples the saved steps already took
            take(config.batch_size)
    policy.train()
    for step in range(first, steps):
        # longest first: where rows cannot be packed, a micro-batch pads to similar lengths
        picked = sorted(take(config.batch_size), key=lambda i: -_length(trajectories[i]))
        batch = collate([trajectories[i] for i in picked], pad_id, include_meta=True)
        mask = training_mask(batch.policy_mask, batch.response_mask, config.mask_env)
        scaled = mask * per_example[picked].unsqueeze(1)
        if token_weights is not None:
            scaled = scaled * _token_weight_tensor(token_weights, picked, mask.shape[1])
        weights = token_mean_weights(scaled)  # [B, R]
        start = time.perf_counter()
        total, norm = _update(policy, batch, weights, config, bf16, optimizer)
        scheduler.step()
        seconds += time.perf_counter() - start
        tokens += float(batch.attention_mask.sum())
        loss_tokens += float(mask.sum())
        stats = {
            "sft/loss": total,
            "sft/grad_norm": norm,
            "sft/lr": scheduler.get_last_lr()[0],
            "sft/tokens_per_s": tokens / seconds,
            "sft/loss_tokens_per_s": loss_tokens / seconds,
        }
        history.append(stats)
        if log is not None:
            log(step + 1, stats)
        if checkpoints is not None and checkpoints.due(step + 1, steps):
            state = {"history": history, "counters": (seconds, tokens, loss_tokens)}
            checkpoints.save(step + 1, policy, optimizer, scheduler, state)
    policy.eval()
    return history
