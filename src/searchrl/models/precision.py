"""Is bfloat16 fast here? Decided once per process, from the hardware, never assumed.

On a GPU, yes. On a CPU it depends on the instruction set: with AVX512-BF16 or AMX a bf16
matmul ran ~4.6x faster than fp32 on one thread of our 2-core dev machines (460 vs 100
GFLOP/s), while AVX2-only CPUs emulate it ~50x slower than fp32. The CPU flags tell which;
where they cannot be read, a short matmul probe decides.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import torch

_FAST_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpu_flags() -> set[str] | None:
    """The `flags` of /proc/cpuinfo, or None where it does not exist (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def _probe_bf16_speedup(size: int = 512, repeats: int = 4) -> float:
    """fp32 time / bf16 time of a square matmul (> 1 means bf16 is faster)."""
    a = torch.randn(size, size)
    times = []
    for dtype in (torch.float32, torch.bfloat16):
        x = a.to(dtype)
        x @ x
        start = time.perf_counter()
        for _ in range(repeats):
            x @ x
        times.append(time.perf_counter() - start)
    return times[0] / max(times[1], 1e-9)


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """True when this CPU computes bf16 matmuls natively (AVX512-BF16 / AMX)."""
    flags = _cpu_flags()
    if flags is not None:
        return any(flag in flags for flag in _FAST_BF16_FLAGS)
    return _probe_bf16_speedup() > 1.5


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 compute pays off on `device` (CUDA: always; CPU: native support)."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and cpu_has_fast_bf16()
