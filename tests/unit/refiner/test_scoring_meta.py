"""The candidate answers' log-probs (KV-cached batch vs one full forward per candidate), and
the discriminator's and trimmer's decisions from them, checked by hand."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.refiner.meta import Reading, logsumexp
from searchrl.refiner.scoring import candidate_ids, candidate_logprobs


def test_candidates_are_digit_tokens_then_eos(tokenizer: PreTrainedTokenizerBase) -> None:
    cands = candidate_ids(tokenizer, 10)
    eos = tokenizer.eos_token_id
    assert cands[0] == [tokenizer.convert_tokens_to_ids("0"), eos]
    assert cands[10] == [*tokenizer.encode("10", add_special_tokens=False), eos]
    assert len(cands[10]) == 3 and cands[10][:1] == cands[1][:1]  # "1" is a prefix of "10"


def _naive(model: torch.nn.Module, prompt: list[int], cand: list[int]) -> float:
    ids = torch.tensor([prompt + cand])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(cand))


def test_batched_scores_match_full_forwards(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompts = [tokenizer.encode("short prompt"), tokenizer.encode("a longer prompt, with more")]
    cands = [candidate_ids(tokenizer, 2), candidate_ids(tokenizer, 11)]
    got = candidate_logprobs(tiny, prompts, cands, tokenizer.pad_token_id or 0, 8)
    for prompt, row_cands, row in zip(prompts, cands, got, strict=True):
        assert len(row) == len(row_cands)
        for cand, value in zip(row_cands, row, strict=True):
            assert value == pytest.approx(_naive(tiny, prompt, cand), abs=1e-4)
    split = candidate_logprobs(tiny, prompts, cands, tokenizer.pad_token_id or 0, 1)
    flat = [v for row in got for v in row]
    assert [v for row in split for v in row] == pytest.approx(flat, abs=1e-5)


def _reading(probs: list[float]) -> Reading:
    return Reading("p", [1], [[k] for k in range(len(probs))], [math.log(p) for p in probs])


def test_discriminator_margin_by_hand() -> None:
    reading = _reading([0.5, 0.3, 0.2])  # P(revise) = 0.5 = P(no revision): log-odds 0
    assert reading.log_odds == pytest.approx(0.0, abs=1e-12)
    assert not reading.revise(0.0)  # strictly greater than τ
    assert reading.revise(-0.01)
    tilted = _reading([0.2, 0.5, 0.3])
    assert tilted.log_odds == pytest.approx(math.log(0.8 / 0.2))
    assert tilted.revise(1.0) and not tilted.revise(1.5)
    assert not _reading([1.0]).revise(-100.0)  # no step, nothing to revise


def test_trimmer_distribution_argmax_and_draws() -> None:
    reading = _reading([0.4, 0.06, 0.36, 0.18])
    assert reading.trimmer() == pytest.approx([0.1, 0.6, 0.3])
    assert reading.cut(None) == 2
    assert _reading([0.2, 0.4, 0.4]).cut(None) == 1  # ties go to the earliest step
    draws = [reading.cut(random.Random(seed)) for seed in range(3000)]
    shares = [draws.count(k) / len(draws) for k in (1, 2, 3)]
    assert shares == pytest.approx([0.1, 0.6, 0.3], abs=0.03)
    assert reading.cut(random.Random(7)) == reading.cut(random.Random(7))


def test_tiny_model_decision_from_its_own_logprobs(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompt = tokenizer.encode("review these steps")
    cands = candidate_ids(tokenizer, 3)
    logp = candidate_logprobs(tiny, [prompt], [cands], 0, 4)[0]
    reading = Reading("", prompt, cands, logp)
    by_hand = [_naive(tiny, prompt, c) for c in cands]
    odds = logsumexp(by_hand[1:]) - by_hand[0]
    assert reading.log_odds == pytest.approx(odds, abs=1e-4)
    assert reading.revise(odds - 0.01) and not reading.revise(odds + 0.01)
    weights = [math.exp(v) for v in by_hand[1:]]
    assert reading.trimmer() == pytest.approx([w / sum(weights) for w in weights], abs=1e-4)
