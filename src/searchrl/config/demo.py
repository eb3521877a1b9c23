"""`searchrl demo`'s settings: world → BM25 index → SFT warm start → GRPO → held-out
evaluation, sized for a 2-core CPU (its own module: the RL and SFT configs it fills in live in
`config.train`).

The RL stage is the CPU recipe (`presets/tiny_cpu_grpo.yaml`) with the few changes listed in
`DEMO_DIFFERENCES`, each with its reason; the demo prints them, and a test checks that the demo
differs from the preset in exactly those settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from searchrl.config.data import WorldConfig
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.sft import SFTConfig
from searchrl.config.train import (
    AlgoConfig,
    DataConfig,
    LoggingConfig,
    OptimConfig,
    RewardConfig,
    TrainConfig,
)

RECIPE = "tiny_cpu_grpo"
"""The preset the demo's RL stage follows."""

DEMO_STEPS = 8
DEMO_LR = 1e-5

DEMO_DIFFERENCES: dict[str, tuple[object, str]] = {
    "steps": (24, "the time budget: the demo has minutes, the recipe's evidence an hour a seed"),
    "optim.lr": (5e-6, "fewer steps, each larger, so the few steps move the policy"),
    "optim.warmup_ratio": (0.1, "no warm-up in a run this short"),
    "save_every": (6, "one checkpoint, at the end"),
    "model.name_or_path": ("embedded-warm", "RL starts from the demo's own SFT on its world"),
}
"""Dotted key → (the recipe's value, why the demo differs)."""


def _demo_sft() -> SFTConfig:
    """The warm start: plan-style reference transcripts, one sequence per micro-batch (no
    padding, so attention takes the fast unmasked path: 264 vs 192 tokens/s at 2 per
    micro-batch)."""
    return SFTConfig(
        max_examples=200,
        epochs=1.0,
        batch_size=8,
        micro_batch_size=1,
        lr=1e-4,
    )


def _demo_rl() -> TrainConfig:
    """The recipe (`tiny_cpu_grpo`) with `DEMO_DIFFERENCES`; held-out EM on 100 test questions
    before and after. The RL questions leave out the warm start's references (the demo points
    `data.exclude_trained_by` at its SFT folder)."""
    return TrainConfig(
        steps=DEMO_STEPS,
        batch_size=2,
        n_samples=8,
        mini_batch_size=2,
        micro_batch_size=8,
        micro_batch_tokens=4096,
        save_every=DEMO_STEPS,
        keep_checkpoints=1,
        model=ModelConfig(dtype="float32"),
        data=DataConfig(eval_size=100),
        algo=AlgoConfig(
            advantage="grpo",
            scale_by_std=False,
            kl_coef=0.0,
            loss_agg="seq-mean-token-sum-norm",
            dynamic_sampling=True,
            max_sampling_rounds=1,
            behaviour_correction="off",
        ),
        optim=OptimConfig(lr=DEMO_LR, warmup_ratio=0.0, grad_clip=1.0),
        reward=RewardConfig(no_answer_score=0.0),
        rollout=RolloutConfig(
            max_turns=5,
            force_answer=True,
            max_response_tokens=120,
            max_obs_tokens=300,
            max_total_tokens=2048,
        ),
        logging=LoggingConfig(progress=True),
    )


@dataclass(frozen=True)
class DemoConfig:
    """`searchrl demo`: world → BM25 index → SFT warm start → GRPO → held-out evaluation."""

    world: WorldConfig = field(default_factory=WorldConfig)
    """The synthetic world (the `demo` preset: 1-4 hops)."""
    sft: SFTConfig = field(default_factory=_demo_sft)
    """The warm start (its `data.world_dir` is set to the demo's world)."""
    rl: TrainConfig = field(default_factory=_demo_rl)
    """The RL run (`policy.init_checkpoint` is set to the warm start's model)."""
