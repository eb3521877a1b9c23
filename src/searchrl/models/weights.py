"""A module's weights as a generation engine reads them: whole (a sharded FSDP weight gathered
across the ranks) and fingerprinted cheaply, so that an engine is synced only after they
changed.

**Gathering.** FSDP2 keeps each weight as a DTensor shard; `DTensor.full_tensor` gathers it
over the mesh's process group, so every rank must make the same calls in the same order. With
FSDP's CPU offload the shards live in host memory while the group is NCCL's, which gathers
GPU tensors only: the shard goes to the mesh's device first (`whole_tensor`).

**The fingerprint** (`weights_version`) is read from torch's version counters, which every
in-place write bumps (optimizer steps, `load_state_dict`, a `mul_` under `no_grad`), plus each
tensor's address (a replaced `param.data`). It costs one Python loop over the tensors, not a
read of the weights: the sum of every weight's bits it replaced took 8-20 s a rollout for a 7B
model's offloaded shards. Torch's fused AdamW kernel writes the weights without bumping the
counters, so the trainer's optimizers report their steps (`track_writes`). A write through
`param.data` is not seen: nothing in searchrl writes weights that way. Under FSDP each rank
fingerprints its own shards and the ranks sum them (one all-reduce of one integer), so every
rank takes the same decision to sync: the sync's gathers are collective.
"""

from __future__ import annotations

from typing import Any

import torch

FINGERPRINT_BITS = 40
"""Each rank's fingerprint is kept below 2**40, so a sum over any realistic number of ranks
stays inside int64."""


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) weight gathered whole (collective: every rank calls it), or the
    tensor itself; an offloaded shard is moved to its mesh's device first (module docstring)."""
    gather = getattr(tensor, "full_tensor", None)
    if not callable(gather):
        return tensor
    mesh_device = tensor.device_mesh.device_type  # type: ignore[attr-defined]
    if tensor.device.type != mesh_device:
        tensor = tensor.to(mesh_device)
    return tensor.full_tensor()  # type: ignore[attr-defined]


def compute_device(module: Any) -> torch.device:
    """Where `module` computes: its parameters' device, or, for FSDP-sharded parameters kept
    in host memory (CPU offload), its mesh's device, where FSDP gathers them for each forward
    (inputs placed on the shards' CPU would meet GPU weights)."""
    param = next(iter(module.parameters()))
    mesh = getattr(param, "device_mesh", None)
    if mesh is not None and mesh.device_type != param.device.type:
        return torch.device(mesh.device_type)
    return param.device


def weights_version(module: Any) -> int:
    """A fingerprint of `module`'s weights that any write changes (module docstring); the
    same on every rank of a sharded module. Collective when the module is sharded."""
    parts = []
    mesh = None
    for tensor in [*module.parameters(), *module.buffers()]:
        local = getattr(tensor, "_local_tensor", None)
        if local is not None:
            mesh = tensor.device_mesh
        inner = tensor if local is None else local
        parts.append((inner.data_ptr(), inner._version, tensor._version))
    fingerprint = hash(tuple(parts)) % 2**FINGERPRINT_BITS
    if mesh is None or not torch.distributed.is_initialized():
        return fingerprint
    total = torch.tensor([fingerprint], dtype=torch.int64, device=mesh.device_type)
    torch.distributed.all_reduce(total, group=mesh.get_group())
    return int(total.item())


_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def weights_digest(module: Any) -> tuple[int, ...]:
    """A fingerprint of the weights' values, the same in every process that holds them (a
    cache key across runs): per parameter and buffer, the sum of its bits read as integers.
    It reads every weight (seconds at 7B), so it is for once-a-run keys; deciding whether to
    sync an engine is `weights_version`'s job."""
    sums = []
    for tensor in [*module.parameters(), *module.buffers()]:
        flat = whole_tensor(tensor.detach()).reshape(-1)
        sums.append(int(flat.view(_INTS[flat.element_size()]).sum(dtype=torch.int64)))
    return tuple(sums)


def track_writes(optimizer: torch.optim.Optimizer) -> None:
    """After every step of `optimizer`, bump the version counters of the weights it updates,
    which torch's fused kernels leave as they were (`weights_version`)."""

    def bump(stepped: torch.optim.Optimizer, *_: Any) -> None:
        torch.autograd.graph.increment_version(
            [p for group in stepped.param_groups for p in group["params"] if p.grad is not None]
        )

    optimizer.register_step_post_hook(bump)
