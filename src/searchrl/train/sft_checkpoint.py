"""Resumable SFT phases (`searchrl sft --resume`): a warm start takes 30–70 minutes on a CPU,
so each phase (the Actor's references, the Meta-Refiner's meta phase) saves a checkpoint every
`save_every` optimizer steps and at its end, with the same atomic writer as RL training.

A checkpoint holds the trained weights, the optimizer and scheduler states, the RNG states and
the phase's step, per-step stats and throughput counters. The order of examples is a seeded
stream (`sft._example_stream`), so a resumed phase replays the stream to its step and goes on
exactly as an unbroken one. A finished phase's last checkpoint lets a resumed run skip it
(weights restored) and continue with what follows; the checkpoints are deleted once the run
has exported its model."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from searchrl.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_trainable,
    restore_rng,
    rng_state,
    save_checkpoint,
    trainable_state,
)


@dataclass(frozen=True)
class PhaseCheckpoints:
    """Where one SFT phase keeps its checkpoints, and how often it writes one."""

    root: Path
    every: int
    """0 = no checkpoints (the phase cannot be resumed)."""

    def due(self, step: int, steps: int) -> bool:
        """Whether to save after `step` (1-based) of `steps`: every `every`, and the last."""
        return self.every > 0 and (step % self.every == 0 or step == steps)

    def save(
        self, step: int, policy: nn.Module, optimizer: Any, scheduler: Any, state: dict[str, Any]
    ) -> None:
        """Checkpoint `step` of the phase (only the newest is kept)."""
        parts = {
            "weights": trainable_state(policy),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
            "state": {"step": step, **state},
        }
        save_checkpoint(self.root, step, parts, keep=1)

    def restore(self, policy: nn.Module, optimizer: Any, scheduler: Any) -> dict[str, Any] | None:
        """Load the newest checkpoint into the policy, optimizer and scheduler; its `state`
        (step, stats, counters), or None when the phase has none."""
        latest = latest_checkpoint(self.root) if self.root.is_dir() else None
        if latest is None:
            return None
        parts = load_checkpoint(latest)
        load_trainable(policy, parts["weights"])
        optimizer.load_state_dict(parts["optimizer"])
        scheduler.load_state_dict(parts["scheduler"])
        restore_rng(parts["rng"])
        return dict(parts["state"])


def saved_step(root: Path) -> int:
    """The step of a phase's newest checkpoint (from its folder name), 0 when none."""
    latest = latest_checkpoint(root) if root.is_dir() else None
    return int(latest.name.split("_")[1]) if latest is not None else 0


def remove(root: Path) -> None:
    """Delete every phase's checkpoints (the run's model is exported)."""
    shutil.rmtree(root, ignore_errors=True)
