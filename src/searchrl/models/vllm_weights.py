"""The trainer's weights into a running vLLM engine, in memory, through vLLM's own in-place
reload (`reload_weights` with a weights iterator: it restores each layer's checkpoint layout,
loads, and re-runs the post-load processing, such as the CPU backend's repacking of linear
weights for its GEMM kernels; writing into the model's parameters directly fails there).

How the tensors travel (`engine_state` yields them one at a time, whole, in the engine's
dtype, on the device they are on):
- An engine in this process (`models.vllm_engine`: the default on CPUs and GPUs) is handed
  the tensors themselves: no copy when the engine computes in the trainer's dtype, one cast
  otherwise, on the trainer's device. On a GPU nothing passes through host memory: a sharded
  (FSDP) weight is gathered on the GPU, cast and loaded before the next one is gathered, so
  the peak is one whole weight.
- An engine in its own processes (overlap) reads them from one shared buffer in RAM
  (`SharedWeights`, a file in /dev/shm mapped by both sides, allocated once per engine and
  rewritten in place at each sync), through a method vLLM mixes into its worker
  (`SharedWeightsLoader`). /dev/shm must hold the engine's weights (Docker's default is
  64 MB): a smaller one is refused with one line before anything is written.

Until December 2026 every sync wrote a new safetensors file to /dev/shm and the worker
reloaded the checkpoint from it (270 MB a step for the 135M model, 15 GB at 7B), before every
rollout call, evaluations included, whether the weights had changed or not. A sync now
happens only when they changed since the engine last saw them (`models.weights`).

The engine runs with its LM head untied (`untied_config`): vLLM's reload loads nothing into a
tied `ParallelLMHead` and puts its old kernel back, so an engine whose head was tied kept
sampling from the first head however far training moved the embedding.

A LoRA policy is merged into a plain copy before it is synced (`train.models`); syncing only
the adapters would be one more source beside `engine_state`.
"""

from __future__ import annotations

import copy
import math
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from searchrl.models.vllm_compat import worker_reload
from searchrl.models.weights import whole_tensor
from searchrl.utils.errors import SearchRLError

WEIGHTS_BUFFER = "weights.bin"
ALIGN = 64
"""Byte alignment of each tensor inside the shared buffer."""

Layout = list[tuple[str, str, list[int], int]]
"""(name, dtype name, shape, byte offset) of each tensor in a shared buffer."""


def untied_config(hf_config: Any) -> Any:
    """The engine's copy of a transformers config, its LM head untied (module docstring)."""
    config = copy.deepcopy(hf_config)
    config.tie_word_embeddings = False
    return config


def engine_state(
    source: Any, dtype: torch.dtype, device: str | torch.device | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """`source`'s weights under their HF names, whole (`models.weights.whole_tensor`:
    collective for sharded weights), in `dtype`, on `device` (None: where each one is, on the
    mesh's device for a sharded one), one at a time and without a copy where nothing changes;
    the LM head always among them (a tied one is in `state_dict` under both names)."""
    for name, tensor in source.state_dict().items():
        whole = whole_tensor(tensor.detach())
        yield name, whole.to(device or whole.device, dtype)


def ties_head(source: Any) -> bool:
    """Whether `source`'s config ties its LM head to the input embedding."""
    return bool(getattr(getattr(source, "config", None), "tie_word_embeddings", False))


class SharedWeights:
    """One buffer in RAM shared with an engine's worker process: the weights are copied into
    it at each sync and the worker loads from views of it. Sized by the first source written
    (the shapes in its `state_dict`); the model's tensors never change shape."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / WEIGHTS_BUFFER
        self.layout: Layout = []
        self._buffer: torch.Tensor | None = None

    def write(self, source: Any, dtype: torch.dtype) -> Layout:
        """Copy `source`'s weights (`engine_state`) into the buffer, creating it the first
        time; returns the layout."""
        shapes = [(name, list(t.shape)) for name, t in source.state_dict().items()]
        if self._buffer is None:
            self._allocate(shapes, dtype)
        if [name for name, _ in shapes] != [name for name, *_ in self.layout]:
            raise ValueError("the weights to sync are not those the engine was started with")
        assert self._buffer is not None
        views = dict(_views(self._buffer, self.layout))
        with torch.no_grad():
            for name, tensor in engine_state(source, dtype):
                views[name].copy_(tensor)
        return self.layout

    def _allocate(self, shapes: Iterable[tuple[str, list[int]]], dtype: torch.dtype) -> None:
        """Lay the tensors out and map the buffer, if the folder's file system can hold it."""
        offset, size = 0, torch.empty((), dtype=dtype).element_size()
        for name, shape in shapes:
            self.layout.append((name, str(dtype).removeprefix("torch."), shape, offset))
            offset += math.ceil(math.prod(shape) * size / ALIGN) * ALIGN
        free = shutil.disk_usage(self.path.parent).free
        if free < offset:
            raise SearchRLError(
                f"{self.path.parent}: {free / 2**20:.0f} MiB free, the engine's weights need "
                f"{offset / 2**20:.0f} MiB of shared memory (Docker: --shm-size); or run the "
                "engine in this process (model.vllm_process=same, no overlap)"
            )
        self._buffer = torch.from_file(
            str(self.path), shared=True, size=max(offset, 1), dtype=torch.uint8
        )


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
        worker_reload(self, _views(mapped[1], layout))
