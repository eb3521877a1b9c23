"""Is bfloat16 fast here? Decided once per process, by measurement, never assumed.

On a GPU, yes. On a CPU it depends on more than the instruction set: with AMX a bf16 matmul
ran ~4.6x faster than fp32 on one thread of one 2-core dev machine (460 vs 100 GFLOP/s), but
an Intel Xeon that reports AVX512-BF16 without AMX ran the same matmul at 0.6x the speed of
fp32 (30 vs 49 GFLOP/s), and AVX2-only CPUs emulate it ~50x slower than fp32. So the CPU flags
only rule bf16 out (no AVX512-BF16 or AMX: emulated, never fast, no need to measure); where
they allow it, a short probe of the model's own matmul shape in both precisions decides.

The verdict is kept per machine ($XDG_CACHE_HOME/searchrl/bf16_probe.json, keyed by CPU model,
flags and torch version): a probe on a busy machine can land either side of the bar, and two
processes of one job (a killed evaluation and its restart, a trainer and its evaluator) must
agree on the precision they generate in. `SEARCHRL_BF16=0|1` overrides both.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The dtypes a config may name, by name (the weights', the engine's, the generation copy's)."""

_FAST_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpuinfo_field(name: str) -> str | None:
    """The first `name` line of /proc/cpuinfo, or None where it does not exist (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name):
            return line.partition(":")[2].strip()
    return None


def _cpu_flags() -> set[str] | None:
    """The `flags` of /proc/cpuinfo, or None where it does not exist (not Linux)."""
    flags = _cpuinfo_field("flags")
    return None if flags is None else set(flags.split())


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "searchrl" / "bf16_probe.json"


def _machine_key() -> str:
    """CPU model + flags + torch version: what the probe's verdict depends on."""
    parts = (_cpuinfo_field("model name") or "", _cpuinfo_field("flags") or "", torch.__version__)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _remembered_probe() -> bool:
    """The probe's verdict for this machine, measured once and kept in the cache file (a
    cache that cannot be read or written only costs a new probe)."""
    path, key = _cache_file(), _machine_key()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), dict):
        return bool(known[key]["fast"])
    speedup = _probe_bf16_speedup()
    fast = speedup > FAST_ENOUGH
    known = known if isinstance(known, dict) else {}
    known[key] = {"fast": fast, "speedup": round(speedup, 3), "torch": torch.__version__}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        pass
    return fast


def _probe_bf16_speedup(rows: int = 512, repeats: int = 3) -> float:
    """fp32 time / bf16 time of a [rows, 576] x [576, 1536] matmul (SmolLM2's MLP shape;
    > 1 means bf16 is faster). The two precisions alternate and the best time of each counts,
    so another process busy on the same core slows both alike."""
    a = torch.randn(rows, 576)
    b = torch.randn(576, 1536)
    pairs = {dtype: (a.to(dtype), b.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}
    best = {dtype: float("inf") for dtype in pairs}
    for x, y in pairs.values():
        x @ y  # warm-up: oneDNN picks and caches its kernel
    for _ in range(repeats):
        for dtype, (x, y) in pairs.items():
            start = time.perf_counter()
            x @ y
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / max(best[torch.bfloat16], 1e-9)


FAST_ENOUGH = 1.2
"""bf16 must beat fp32 by this much to be used: a bf16 copy costs memory and a cast per
sync, and bf16 sampling differs slightly from the fp32 policy being trained."""


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """True when bf16 matmuls measurably beat fp32 on this CPU (flags that rule bf16 out skip
    the probe: emulated bf16 is never fast; `SEARCHRL_BF16=0|1` decides without one)."""
    forced = os.environ.get("SEARCHRL_BF16", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    flags = _cpu_flags()
    if flags is not None and not any(flag in flags for flag in _FAST_BF16_FLAGS):
        return False
    return _remembered_probe()


def cpu_summary() -> dict[str, object]:
    """This CPU's name, which of the flags that decide bf16 it has, and the verdict the float
    path follows: what a benchmark's record needs to say which machine measured it."""
    flags = _cpu_flags() or set()
    return {
        "name": _cpuinfo_field("model name"),
        "flags": [f for f in ("avx2", "avx512f", *_FAST_BF16_FLAGS) if f in flags],
        "fast_bf16": cpu_has_fast_bf16(),
    }


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 compute pays off on `device` (CUDA: always; CPU: native support)."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and cpu_has_fast_bf16()
