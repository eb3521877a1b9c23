"""The sampler check on a small case, for any engine (used by test_sampler_check.py for the HF
backend and test_vllm_sampler.py for vLLM): ≥ 10k sampled tokens teacher-forced through the
fp32 model, and ≥ 20k one-token draws at a confident position against its softmax. The model
is a tiny random Llama over the first 1,024 ids of the real vocabulary (the full 49k made
every step's softmax the cost: 80 s against 4 s), its embedding scaled so that most positions
have a top token near p = 0.9 and the mean entropy is about 0.9 nats."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from searchrl.models.generation import SamplingParams
from searchrl.models.sampler_check import (
    ChiSquare,
    Gap,
    TopRate,
    chi_square,
    confident,
    gap,
    next_token_draws,
    teacher_forced,
    top_rate,
)

VOCAB, ROWS, LENGTH, DRAWS = 1024, 48, 224, 20_000
"""48 rows of up to 224 sampled tokens (≥ 10k tokens), 20k one-token draws."""


@dataclass(frozen=True)
class Checked:
    gap: Gap
    top: TopRate
    draws: ChiSquare


def small_model(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(4.0)
    return model


def prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(3, VOCAB, (12,), generator=generator).tolist() for _ in range(ROWS)]


def check(
    backend: object,
    model: torch.nn.Module,
    temperature: float = 1.0,
    align: int = 1,
) -> Checked:
    """Sample with `backend` at `temperature`, score with `model` at temperature 1."""
    rows = prompts()
    params = [SamplingParams(LENGTH, temperature, seed=i) for i in range(len(rows))]
    outputs = backend.generate(rows, params)  # type: ignore[attr-defined]
    sequences = [
        ([*p, *o.token_ids], [False] * len(p) + [True] * len(o.token_ids))
        for p, o in zip(rows, outputs, strict=True)
    ]
    scores = teacher_forced(model, sequences)
    position = confident(model, sequences, scores, align=align)
    counts = next_token_draws(backend, position.context, DRAWS, temperature)
    return Checked(gap(scores), top_rate(scores), chi_square(counts, position.probs))


def assert_exact(result: Checked) -> None:
    """What an exact sampler passes (and a biased one fails: see the tests)."""
    assert result.gap.tokens >= 10_000
    assert abs(result.gap.z) < 4, result.gap
    assert abs(result.top.z) < 4, result.top
    assert result.draws.draws >= DRAWS and 0.8 < result.draws.top_prob < 0.97, result.draws
    assert result.draws.p_value > 1e-3, result.draws
