"""The one test that loads the real embedded SmolLM2 GGUF (~20-60 s on 2 busy cores): the
default model goes through a real multi-turn rollout against a real BM25 index."""

from __future__ import annotations

import pytest
import torch

from searchrl.config.data import world_preset
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.world import generate_world
from searchrl.models.loading import load_policy
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.loop import run_rollouts


@pytest.mark.slow
def test_embedded_model_rolls_out_with_search() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = load_policy(ModelConfig(), max_model_len=4096)
        world = generate_world(world_preset("test"))
        questions = world.questions["test"][:2]
        config = RolloutConfig(max_turns=1, max_response_tokens=12, temperature=0.0)
        trajs = run_rollouts(
            policy.backend,
            policy.tokenizer,
            BM25Retriever.build(world.documents),
            questions,
            config,
        )
    finally:
        torch.set_num_threads(threads)
    assert policy.model is not None and policy.model.dtype == torch.float32
    # dequantized weights must not stay flagged as quantized (that blocks training and saving)
    assert not policy.model.is_quantized
    assert not hasattr(policy.model.config, "quantization_config")
    assert policy.tokenizer.eos_token == "<|im_end|>"
    for traj in trajs:
        assert traj.prompt.startswith("<|im_start|>")
        assert 1 <= traj.stats.turns <= 2 and traj.stats.stop_reason
        assert traj.segments[0].role == "policy"
        for segment in traj.segments:
            assert policy.tokenizer.decode(segment.token_ids) == segment.text
            if segment.role == "policy":
                assert len(segment.token_ids) <= 12
