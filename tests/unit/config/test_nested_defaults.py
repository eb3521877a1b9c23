"""A partial section is applied on top of its field's own default, not the class defaults:
before this, `searchrl demo rl.steps=5` trained with TrainConfig's batch of 512 prompts and
`searchrl eval --set rollout.max_turns=2` silently sampled at temperature 1 instead of greedy."""

from __future__ import annotations

from searchrl.config.demo import DemoConfig
from searchrl.config.eval import EvalConfig
from searchrl.config.loading import from_dict, load_config
from searchrl.config.train import TrainConfig


def test_demo_override_keeps_the_demo_rl_settings() -> None:
    demo = load_config(DemoConfig, None, ["rl.steps=5", "rl.optim.lr=2e-5"])
    assert demo.rl.steps == 5 and demo.rl.optim.lr == 2e-5
    assert demo.rl.batch_size == DemoConfig().rl.batch_size != TrainConfig().batch_size
    assert demo.rl.optim.warmup_ratio == DemoConfig().rl.optim.warmup_ratio
    assert demo.rl.rollout.max_response_tokens == DemoConfig().rl.rollout.max_response_tokens


def test_eval_override_keeps_greedy_decoding() -> None:
    config = load_config(EvalConfig, None, ["rollout.max_turns=2"])
    assert config.rollout.max_turns == 2 and config.rollout.temperature == 0.0
    assert from_dict(EvalConfig, {"rollout": {"topk": 5}}).rollout.temperature == 0.0
    assert load_config(EvalConfig, None, ["rollout.temperature=0.7"]).rollout.temperature == 0.7
