"""What a Trainer writes to resume exactly, and how it reads it back: weights, optimizers,
schedules, the prompt sampler's position, RNG states and the signal meter.

Apart from the loop so the loop stays about one RL step; unsharded runs write one file per
step (`train.checkpoint`), FSDP runs write each rank's shards plus rank 0's small parts
(`train.fsdp`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchrl.train import checkpoint as ckpt
from searchrl.train import fsdp

if TYPE_CHECKING:
    from searchrl.train.loop import Trainer


def _small_state(trainer: Trainer) -> dict[str, Any]:
    """The parts rank 0 writes next to the FSDP shards (which hold weights and optimizers):
    schedules, the trainer's position with its RNG states, the signal meter."""
    parts: dict[str, Any] = {
        "scheduler": trainer.scheduler.state_dict(),
        "trainer": {
            "step": trainer.step_count,
            "sampler": trainer.sampler.state(),
            "rng": ckpt.rng_state(),
        },
        "signal": trainer.meter.state(),
    }
    if trainer.critic_scheduler is not None:
        parts["critic_scheduler"] = trainer.critic_scheduler.state_dict()
    return parts


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """Everything an exact resume needs."""
    parts = _small_state(trainer)
    parts["policy"] = ckpt.trainable_state(trainer.policy)
    parts["optimizer"] = trainer.optimizer.state_dict()
    if trainer.critic is not None:
        assert trainer.critic_optimizer is not None and trainer.critic_scheduler is not None
        parts["critic"] = ckpt.trainable_state(trainer.critic)
        parts["critic_optimizer"] = trainer.critic_optimizer.state_dict()
    return parts


def save_trainer(trainer: Trainer, root: Path) -> Path:
    """Atomically write a checkpoint of the current step (sharded: every rank calls it; the
    sharded weights and optimizers are not gathered into a state dict only to be dropped)."""
    keep = trainer.config.keep_checkpoints
    if trainer.dist.sharded:
        return fsdp.save_checkpoint(root, trainer, _small_state(trainer), keep)
    return ckpt.save_checkpoint(root, trainer.step_count, trainer_state(trainer), keep)


def restore_trainer(trainer: Trainer, path: Path) -> None:
    """Load a checkpoint written by `save_trainer` into `trainer`."""
    sharded = trainer.dist.sharded
    if sharded:
        parts = fsdp.load_checkpoint(path, trainer)
    else:
        parts = ckpt.load_checkpoint(path)
        ckpt.load_trainable(trainer.policy, parts["policy"])
        trainer.optimizer.load_state_dict(parts["optimizer"])
    trainer.scheduler.load_state_dict(parts["scheduler"])
    if trainer.critic is not None:
        assert trainer.critic_optimizer is not None and trainer.critic_scheduler is not None
        if not sharded:
            ckpt.load_trainable(trainer.critic, parts["critic"])
            trainer.critic_optimizer.load_state_dict(parts["critic_optimizer"])
        trainer.critic_scheduler.load_state_dict(parts["critic_scheduler"])
    position = parts["trainer"]
    trainer.step_count = position["step"]
    trainer.sampler.load_state(position["sampler"])
    if "signal" in parts:  # checkpoints from before the signal budget have none
        trainer.meter.load_state(parts["signal"])
    if not sharded:  # sharded: each rank restored its own RNG state
        ckpt.restore_rng(position["rng"])
