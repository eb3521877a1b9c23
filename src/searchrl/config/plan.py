"""The GPUs a training run's memory plan is made for (see `train.memory_plan`)."""

from __future__ import annotations

from dataclasses import dataclass

from searchrl.config.checks import PositiveFloat, PositiveInt


@dataclass(frozen=True)
class PlanConfig:
    """Before anything loads, a run on GPUs adds up what each rank will hold (weights,
    gradients and AdamW states by strategy, the frozen reference, the critic, activations at
    the micro-batch, vLLM's share and its KV cache) and refuses a plan that does not fit, in
    one line saying by how much. `searchrl train --dry-run` prints the plan for the GPUs
    named here, without a GPU, without loading weights (the model's config.json only) and
    without the data files."""

    gpus: PositiveInt = 1
    """GPUs (one training process each) a dry run plans for; a run on GPUs plans for its own
    processes (`accelerate launch --num_processes`)."""
    gpu_memory_gib: PositiveFloat = 80.0
    """Memory of one GPU a dry run plans for (80: an H100 or A100 80 GB); a run on GPUs reads
    its own."""
    check: bool = True
    """Refuse to start a run on GPUs whose plan does not fit. The plan is an estimate (the
    longest sequences in every micro-batch): turn this off to try a setting anyway."""
