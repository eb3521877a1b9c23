"""Fully sharded data parallel training (torch FSDP2, `fully_shard`) for models that one
process cannot hold with its optimizer: the paper's 7B runs shard parameters, gradients and
AdamW states over 8 GPUs and offload them to CPU memory.

Each decoder layer is its own FSDP unit (gathered just before it runs, freed after), then the
root module takes the embeddings and the head. Parameters become DTensors sharded over the
ranks; anything that needs whole weights (the generation engine's sync, the final export)
gathers them collectively (`models.weights.whole_tensor`), so every rank must make the same
call at the same time.

The model is read into host memory and sharded from there (`train.environment.load_policy`):
`fully_shard` moves one unit at a time to the mesh's GPU, shards it and frees the rest, so a
GPU never holds the whole fp32 model (a 7B model's 30 GB on every rank before sharding, which
left no room for the engine). With `fsdp_cpu_offload` the shards go back to host memory.

Checkpoints are sharded too (torch.distributed.checkpoint): every rank writes its shard of
the weights and optimizer states into the same step directory, rank 0 adds the small parts
(schedulers, data position) and each rank its RNG state; the directory is renamed into place
and `LATEST` updated only after all ranks are done, as for single-process checkpoints.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from searchrl.train import checkpoint as ckpt

SHARDED_PARTS = "sharded"


def shard(module: nn.Module, cpu_offload: bool) -> nn.Module:
    """Shard `module` in place over all ranks: one FSDP unit per decoder layer, then the root.
    With `cpu_offload`, parameters, gradients and optimizer states live in CPU memory."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    options: dict[str, Any] = {"mesh": mesh}
    if cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(module):
        fully_shard(layer, **options)
    fully_shard(module, **options)
    return module


def decoder_layers(module: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a causal LM (or of a critic's backbone), through LoRA/peft
    and critic wrappers; empty when none are found (the root is then the only unit)."""
    for name, child in module.named_modules():
        if name.endswith("layers") and isinstance(child, nn.ModuleList):
            return list(child)
    return []


def _state(trainer: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    state = {
        "policy": get_model_state_dict(trainer.policy),
        "optimizer": get_optimizer_state_dict(trainer.policy, trainer.optimizer),
    }
    if trainer.critic is not None:
        state["critic"] = get_model_state_dict(trainer.critic)
        state["critic_optimizer"] = get_optimizer_state_dict(
            trainer.critic, trainer.critic_optimizer
        )
    return state


def save_checkpoint(root: Path, trainer: Any, small_parts: dict[str, Any], keep: int) -> Path:
    """Every rank calls this: shards of weights and optimizer states, rank 0's small parts,
    each rank's RNG state; renamed into place once all ranks have written."""
    import torch.distributed.checkpoint as dcp

    rank, barrier = trainer.dist.rank, trainer.dist.barrier
    final = ckpt.step_dir(root, trainer.step_count)
    tmp = root / f".tmp_{final.name}_sharded"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    barrier()
    dcp.save(_state(trainer), checkpoint_id=str(tmp / SHARDED_PARTS))
    torch.save(ckpt.rng_state(), tmp / f"rng_rank{rank}.pt")
    if rank == 0:
        for name, state in small_parts.items():
            torch.save(state, tmp / f"{name}.pt")
    barrier()
    if rank == 0:
        ckpt.publish(root, tmp, final, keep)
    barrier()
    return final


def load_checkpoint(path: Path, trainer: Any) -> dict[str, Any]:
    """Every rank calls this: loads its shards into the sharded modules and optimizers,
    restores its own RNG state, and returns the small parts (schedulers, trainer position)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = _state(trainer)
    dcp.load(state, checkpoint_id=str(path / SHARDED_PARTS))
    set_model_state_dict(trainer.policy, state["policy"])
    set_optimizer_state_dict(trainer.policy, trainer.optimizer, state["optimizer"])
    if trainer.critic is not None:
        set_model_state_dict(trainer.critic, state["critic"])
        set_optimizer_state_dict(
            trainer.critic, trainer.critic_optimizer, state["critic_optimizer"]
        )
    ckpt.restore_rng(torch.load(path / f"rng_rank{trainer.dist.rank}.pt", weights_only=False))
    return {
        p.stem: torch.load(p, map_location="cpu", weights_only=False)
        for p in sorted(path.glob("*.pt"))
        if not p.stem.startswith("rng_rank")
    }


def full_state_dict(module: nn.Module, main: bool) -> dict[str, torch.Tensor] | None:
    """Whole weights gathered to rank 0 in CPU memory (collective); None on other ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(module, options=options)
    return state if main else None
