"""A tiny random Llama and a scripted rollout, so trainer tests run in seconds."""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from searchrl.config import from_dict
from searchrl.config.train import TrainConfig
from searchrl.types import Question, Trajectory

VOCAB = 64


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def questions(n: int = 6) -> list[Question]:
    return [
        Question(uid=f"q{i}", question=f"question {i}", golden_answers=("yes",)) for i in range(n)
    ]


def scripted_rollout(
    qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
) -> list[Trajectory]:
    """policy / env / policy segments of random ids; the answer is right about half the time."""
    out = []
    for qi, q in enumerate(qs):
        for s in range(n_samples):
            rng = random.Random(seed * 1009 + qi * 31 + s + (7 if greedy else 0))
            t = Trajectory(
                id=f"{q.uid}-{s}", question=q.question, golden_answers=list(q.golden_answers)
            )
            t.uid, t.sample = q.uid, s
            t.prompt_ids = [rng.randrange(1, VOCAB) for _ in range(rng.randint(3, 6))]
            t.append("policy", "p", [rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 5))])
            t.append("env", "e", [rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 4))])
            t.append("policy", "p", [rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 4))])
            t.answer = "yes" if rng.random() < 0.5 else "no"
            t.stats.searches = 1
            out.append(t)
    return out


def tiny_config(**overrides: object) -> TrainConfig:
    data = {
        "steps": 4,
        "batch_size": 4,
        "n_samples": 2,
        "mini_batch_size": 2,
        "micro_batch_size": 3,
        "policy": {"autocast": "fp32"},
        "optim": {"lr": 1e-2, "warmup_ratio": 0.0, "critic_lr": 1e-2},
        "logging": {"tensorboard": False, "progress": False},
    }
    data.update(overrides)
    return from_dict(TrainConfig, data)
