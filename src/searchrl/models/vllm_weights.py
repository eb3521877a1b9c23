"""The trainer's weights into a running vLLM engine, in memory, through vLLM's own in-place
reload (`reload_weights` with a weights iterator: it restores each layer's checkpoint layout,
loads, and re-runs the post-load processing, such as the CPU backend's repacking of linear
weights for its GEMM kernels; writing into the model's parameters directly fails there).

- An engine in this process (`models.vllm_engine`) is handed the tensors themselves: no copy
  at all when the engine computes in the trainer's dtype, one cast otherwise.
- An engine in its own processes reads them from one shared buffer in RAM (`SharedWeights`,
  a file in /dev/shm mapped by both sides, allocated once per engine and rewritten in place
  at each sync), through a method vLLM mixes into its worker (`SharedWeightsLoader`). vLLM's
  own transfer engines (NCCL, CUDA IPC) need GPUs; its RPC serializes tensors as raw bytes
  that arrive untyped.

Until December 2026 every sync wrote a new safetensors file to /dev/shm and the worker
reloaded the checkpoint from it (270 MB a step for the 135M model, 15 GB at 7B), before every
rollout call, evaluations included, whether the weights had changed or not. A sync now
happens only when they changed since the engine last saw them (`weights_version`).

The engine runs with its LM head untied (`untied_config`): vLLM's reload loads nothing into a
tied `ParallelLMHead` and puts its old kernel back, so an engine whose head was tied kept
sampling from the first head however far training moved the embedding.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import torch

WEIGHTS_BUFFER = "weights.bin"
ALIGN = 64
"""Byte alignment of each tensor inside the shared buffer."""

Layout = list[tuple[str, str, list[int], int]]
"""(name, dtype name, shape, byte offset) of each tensor in a shared buffer."""


_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def weights_version(module: Any) -> tuple[int, ...] | None:
    """A fingerprint of `module`'s weights: per parameter and buffer, the sum of its bits read
    as integers. Any write changes it (however it was made: torch's in-place version counter
    misses the fused AdamW kernel the trainer uses, which leaves it unchanged), and reading
    the weights once costs a fraction of a sync. None for sharded (FSDP) weights: a shard
    that did not change on one rank must not keep that rank out of the collective gather,
    so they are always synced."""
    sums = []
    for tensor in [*module.parameters(), *module.buffers()]:
        if hasattr(tensor, "_local_tensor"):
            return None
        flat = tensor.detach().reshape(-1)
        sums.append(int(flat.view(_INTS[flat.element_size()]).sum(dtype=torch.int64)))
    return tuple(sums)


def untied_config(hf_config: Any) -> Any:
    """The engine's copy of a transformers config, its LM head untied (module docstring)."""
    config = copy.deepcopy(hf_config)
    config.tie_word_embeddings = False
    return config


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP DTensor) weight gathered whole (collective), or the tensor itself."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def engine_state(source: Any, dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    """`source`'s weights under their HF names, whole, on the CPU, in `dtype`, without a copy
    where they already are; the LM head always among them (a tied one is in `state_dict`
    under both names)."""
    return [
        (name, _whole(tensor.detach()).to("cpu", dtype))
        for name, tensor in source.state_dict().items()
    ]


def ties_head(source: Any) -> bool:
    """Whether `source`'s config ties its LM head to the input embedding."""
    return bool(getattr(getattr(source, "config", None), "tie_word_embeddings", False))


class SharedWeights:
    """One buffer in RAM shared with an engine's worker process: the weights are copied into
    it at each sync and the worker loads from views of it. Sized by the first state written;
    the model's tensors never change shape."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / WEIGHTS_BUFFER
        self.layout: Layout = []
        self._buffer: torch.Tensor | None = None

    def write(self, state: list[tuple[str, torch.Tensor]]) -> Layout:
        """Copy `state` into the buffer (creating it the first time); returns the layout."""
        if self._buffer is None:
            offset = 0
            for name, tensor in state:
                dtype = str(tensor.dtype).removeprefix("torch.")
                self.layout.append((name, dtype, list(tensor.shape), offset))
                offset += math.ceil(tensor.numel() * tensor.element_size() / ALIGN) * ALIGN
            self._buffer = torch.from_file(
                str(self.path), shared=True, size=max(offset, 1), dtype=torch.uint8
            )
        views = dict(_views(self._buffer, self.layout))
        if [name for name, _ in state] != [name for name, *_ in self.layout]:
            raise ValueError("the weights to sync are not those the engine was started with")
        with torch.no_grad():
            for name, tensor in state:
                views[name].copy_(tensor)
        return self.layout


def _views(buffer: torch.Tensor, layout: Layout) -> list[tuple[str, torch.Tensor]]:
    """The tensors of `layout`, as views into a uint8 `buffer`."""
    out = []
    for name, dtype_name, shape, offset in layout:
        dtype = getattr(torch, dtype_name)
        count = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        out.append((name, buffer[offset : offset + count].view(dtype).view(shape)))
    return out


class SharedWeightsLoader:
    """Mixed into vLLM's worker (`worker_extension_cls`, see `models.vllm_engine`): the worker
    side of `SharedWeights`. The buffer is mapped once and read in place."""

    def searchrl_load_shared(self, path: str, layout: Layout) -> None:
        """Reload the model from the shared buffer at `path` (vLLM's in-place reload)."""
        mapped = getattr(self, "_searchrl_buffer", None)
        if mapped is None or mapped[0] != path:
            size = Path(path).stat().st_size
            mapped = (path, torch.from_file(path, shared=True, size=size, dtype=torch.uint8))
            self._searchrl_buffer = mapped
        self.reload_weights(  # type: ignore[attr-defined]
            weights_iterator=_views(mapped[1], layout), is_checkpoint_format=True
        )
