"""`searchrl demo`'s settings: world → BM25 index → SFT warm start → GRPO → held-out
evaluation, sized for a 2-core CPU (its own module: the RL and SFT configs it fills in live in
`config.train`).

The RL stage is the CPU recipe (`presets/tiny_cpu_grpo.yaml`) with the few changes listed in
`DEMO_DIFFERENCES`, each with its reason; the demo prints them, and a test checks that the demo
differs from the preset in exactly those settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from searchrl.config.data import WorldConfig
from searchrl.config.loading import load_config
from searchrl.config.presets import resolve_config
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig

RECIPE = "tiny_cpu_grpo"
"""The preset the demo's RL stage follows."""

DEMO_DIFFERENCES: dict[str, tuple[object, object, str]] = {
    "steps": (30, 8, "the time budget: the demo has minutes, the recipe's evidence an hour a seed"),
    "save_every": (10, 8, "one checkpoint, at the end"),
    "screen.max_questions": (0, 64, "screening every pool question takes the recipe ~40 "
                             "minutes on one core; 64 of them keep ~30, more than a batch"),
    "signal.probe_every": (10, 8, "a probe before and after RL (each probe is ~64 rollouts)"),
    "signal.probe_questions": (32, 16, "16 questions sampled 4 times: about a minute a probe"),
    "model.name_or_path": ("embedded-warm", "embedded",
                           "RL starts from the demo's own SFT on its world"),
}  # fmt: skip
"""Dotted key → (the recipe's value, the demo's, why the demo differs)."""


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
    """The recipe (`tiny_cpu_grpo`) with `DEMO_DIFFERENCES`; held-out EM on
    100 test questions before and after. The RL questions leave out the warm start's
    references (the demo points `data.exclude_trained_by` at its SFT folder)."""
    changes = [f"{key}={demo}" for key, (_, demo, _) in DEMO_DIFFERENCES.items()]
    return load_config(TrainConfig, resolve_config(RECIPE), changes)


@dataclass(frozen=True)
class DemoConfig:
    """`searchrl demo`: world → BM25 index → SFT warm start → GRPO → held-out evaluation."""

    world: WorldConfig = field(default_factory=WorldConfig)
    """The synthetic world (the `demo` preset: 1-4 hops)."""
    sft: SFTConfig = field(default_factory=_demo_sft)
    """The warm start (its `data.world_dir` is set to the demo's world)."""
    rl: TrainConfig = field(default_factory=_demo_rl)
    """The RL run (`policy.init_checkpoint` is set to the warm start's model)."""
