"""The sampler check (`models.sampler_check`) on the HF backend: its sampled tokens have the
policy's mean log-prob and its one-token draws the policy's softmax, and the same checks
reject a sampler that is slightly off (temperature 0.9 scored as 1). vLLM's run of the same
checks is in test_vllm_sampler.py."""

from __future__ import annotations

import torch
from tests.unit.models.sampling import assert_exact, check, small_model
from transformers import PreTrainedTokenizerBase

from searchrl.models.hf_backend import HFBackend
from searchrl.models.sampler_check import chi_square


def test_the_hf_sampler_draws_from_the_policy_and_a_biased_one_is_caught(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    model = small_model(tokenizer)
    backend = HFBackend(model, tokenizer, max_batch_size=64)
    assert_exact(check(backend, model))
    biased = check(backend, model, temperature=0.9)
    assert biased.gap.z > 4 and biased.top.z > 4 and biased.draws.p_value < 1e-3, biased


def test_chi_square_pools_the_rare_tokens() -> None:
    from collections import Counter

    probs = torch.tensor([0.9, 0.05, 0.03, 0.02] + [0.0] * 4)
    exact = chi_square(Counter({0: 900, 1: 50, 2: 30, 3: 20}), probs, min_expected=25)
    assert exact.statistic < 1e-6 and exact.dof == 2 and exact.p_value > 0.999  # 0, 1, 2+3
    skewed = chi_square(Counter({0: 960, 1: 20, 2: 10, 3: 10}), probs, min_expected=25)
    assert skewed.p_value < 1e-6 and skewed.top_share == 0.96
