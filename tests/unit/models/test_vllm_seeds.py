"""The run's seed starts a vLLM engine's random stream (runs where vLLM is installed, after the
other engine tests' engines have closed, so this one starts in this process)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tests.unit.models.conftest import VLLM_ENGINE
from transformers import PreTrainedTokenizerBase

from searchrl.models.generation import SamplingParams
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import vllm_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
]


def test_the_run_s_seed_starts_the_engine_s_stream(tokenizer: PreTrainedTokenizerBase) -> None:
    """vLLM on a CPU has one stream per engine; every engine used to start it from the same
    seed, so `refiner_gate.py`'s four draws per question, each on a new engine, were one draw
    four times (and `rollout --seed` changed nothing). The run's seed offsets `vllm_seed`; an
    engine in this process samples from its own stream, which starts where vLLM seeded it,
    and its draws continue that stream whatever the caller draws in between."""
    from searchrl.train.environment import make_backend

    model = tiny_model(tokenizer, hidden_size=128, num_layers=2, seed=1)  # flat: samples vary
    config = replace(VLLM_ENGINE, backend="vllm", generation_dtype="float32", vllm_seed=5)
    engine = make_backend(config, model, tokenizer, 256, seed=2)
    try:
        assert engine.in_process  # type: ignore[attr-defined]
        seeded = torch.Generator().manual_seed(7).get_state()  # vllm_seed 5 + the run's seed 2
        assert torch.equal(engine._here.stream.state, seeded)  # type: ignore[attr-defined]
        prompt = tokenizer.encode("Once upon a time, in a", add_special_tokens=False)
        params = [SamplingParams(max_new_tokens=12, temperature=1.0)]
        first = engine.generate([prompt], params)[0].token_ids
        torch.rand(1000)  # the caller's draws do not move the engine's stream
        second = engine.generate([prompt], params)[0].token_ids
        assert first != second  # the stream moves on between calls
    finally:
        engine.close()  # type: ignore[attr-defined]
