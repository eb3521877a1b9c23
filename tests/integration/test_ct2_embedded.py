"""The CPU engine against the HF reference on the real embedded SmolLM2 (one model load):
float32 writes the same greedy tokens, int8 stays within a stated log-prob tolerance."""

from __future__ import annotations

import pytest
import torch

from searchrl.config.model import ModelConfig
from searchrl.models.ct2_backend import CT2Backend
from searchrl.models.generation import SamplingParams
from searchrl.models.hf_backend import HFBackend
from searchrl.models.loading import load_model
from searchrl.rollout.sampler import encode_prompt, render_prompt

pytest.importorskip("ctranslate2")

QUESTIONS = ("Who founded the city of Rome?", "What is the capital of France?")
INT8_MEAN_ABS_LOGPROB = 0.3
"""int8 vs fp32, mean |Δ log-prob| per generated token; measured 0.13 (docs/rollout.md)."""


@pytest.mark.slow
def test_ct2_matches_the_hf_backend_on_the_embedded_model() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loaded = load_model(ModelConfig())
        model, tokenizer = loaded.model, loaded.tokenizer
        prompts = [
            encode_prompt(tokenizer, render_prompt(tokenizer, q, True), True) for q in QUESTIONS
        ]
        greedy = [SamplingParams(max_new_tokens=12, temperature=0.0)] * len(prompts)
        reference = HFBackend(model, tokenizer, max_batch_size=4).generate(prompts, greedy)
        exact = CT2Backend(model, tokenizer, compute_type="float32").generate(prompts, greedy)
        int8 = CT2Backend(model, tokenizer, compute_type="int8").generate(prompts, greedy)
        gaps = []
        for prompt, out in zip(prompts, int8, strict=True):
            with torch.no_grad():
                ids = torch.tensor([prompt + out.token_ids])
                logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
            fp32 = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])
            gaps.append((torch.tensor(out.logprobs) - fp32.squeeze(1)).abs())
    finally:
        torch.set_num_threads(threads)
    for ours, ref in zip(exact, reference, strict=True):
        assert ours.token_ids == ref.token_ids
        assert ours.logprobs == pytest.approx(ref.logprobs, abs=1e-3)
    assert float(torch.cat(gaps).mean()) < INT8_MEAN_ABS_LOGPROB
