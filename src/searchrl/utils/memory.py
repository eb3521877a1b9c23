"""Keep freed heap memory in the process instead of handing it back to the OS each time.

CTranslate2 allocates and frees its activation buffers on every forward. glibc serves blocks
above its mmap threshold (128 KiB, adapting up to 32 MiB) with fresh `mmap`s and trims the
heap on `free`, so each batch pays page faults again: encoding 400 passages took ~1 million
minor faults and as much system CPU time as the int8 matmuls themselves. Raising the mmap
and trim thresholds (`mallopt`) lets those blocks be reused; the process keeps its peak heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GiB once per process; False where there
    is no glibc (macOS, musl) and nothing was changed."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    _done = bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, THRESHOLD)
    )
    return _done
