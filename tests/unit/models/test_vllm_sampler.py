"""The sampler check (`models.sampler_check`) on a real vLLM engine (CPU build or GPU) in fp32:
its sampled tokens have the policy's mean log-prob, its one-token draws the policy's softmax,
and the same checks reject it when it samples at temperature 0.9 while the policy is scored at
1. Skipped where vLLM is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.unit.models.conftest import VLLM_ENGINE
from tests.unit.models.sampling import assert_exact, check, small_model
from transformers import PreTrainedTokenizerBase

from searchrl.models.vllm_backend import VLLMBackend, vllm_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
]


@pytest.fixture(scope="module")
def small(tokenizer: PreTrainedTokenizerBase) -> Iterator[tuple[VLLMBackend, object]]:
    model = small_model(tokenizer)
    engine = VLLMBackend.from_module(
        model, tokenizer, VLLM_ENGINE, dtype="float32", max_model_len=512
    )
    yield engine, model
    engine.close()


def test_vllm_samples_from_the_policy_and_a_biased_sampler_is_caught(
    small: tuple[VLLMBackend, object],
) -> None:
    engine, model = small
    assert_exact(check(engine, model, align=32))  # type: ignore[arg-type]
    biased = check(engine, model, temperature=0.9, align=32)  # type: ignore[arg-type]
    assert biased.gap.z > 4 and biased.top.z > 4 and biased.draws.p_value < 1e-3, biased
