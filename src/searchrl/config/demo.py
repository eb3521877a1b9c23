"""`searchrl demo`'s settings: world → BM25 index → SFT warm start → GRPO → held-out
evaluation, sized for a 2-core CPU (its own module: the RL and SFT configs it fills in live in
`config.train`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from searchrl.config.data import WorldConfig
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


def _demo_sft() -> SFTConfig:
    """The warm start: enough plan-style reference transcripts that 2- to 4-hop questions are
    answered before RL starts; one sequence per micro-batch (no padding, so attention takes
    the fast unmasked path: 264 vs 192 tokens/s at 2 per micro-batch)."""
    return SFTConfig(
        max_examples=200,
        epochs=1.0,
        batch_size=8,
        micro_batch_size=1,
        lr=1e-4,
    )


def _demo_rl() -> TrainConfig:
    """Two GRPO steps with dynamic sampling's filter (4 prompts × 4 samples, groups with equal
    rewards skipped, no top-up round); held-out EM on 100 test questions before and after.
    Sized for the 15-minute budget: from a fresh clone with 3 steps of up to 2 rounds,
    `make demo` took 16.6 min on the idle 2-core machine (SFT 5.9 min, 3 steps 62/95/112 s).

    Against the drift toward searching until the turn budget runs out (docs/training.md): Dr.
    GRPO's length-neutral loss, −0.5 for ending without an answer, five search turns for
    four-hop questions, and an answer forced in the final round."""
    return TrainConfig(
        steps=2,
        batch_size=4,
        n_samples=4,
        mini_batch_size=4,
        micro_batch_size=1,
        save_every=1,
        keep_checkpoints=1,
        data=DataConfig(eval_size=100),
        algo=AlgoConfig(
            advantage="grpo",
            kl_coef=0.0,
            loss_agg="seq-mean-token-sum-norm",
            dynamic_sampling=True,
            max_sampling_rounds=1,
            behaviour_correction="off",
        ),
        optim=OptimConfig(lr=1e-5, warmup_ratio=0.0, grad_clip=1.0),
        reward=RewardConfig(no_answer_score=-0.5),
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
