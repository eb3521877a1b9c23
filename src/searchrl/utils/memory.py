"""glibc's malloc thresholds, set for what a process does.

`release_freed_memory` (every `searchrl` command, `cli.main`): training and generation on
torch. glibc serves allocations below its mmap threshold from the heap, and the threshold
grows (up to 32 MiB) every time a large block is freed. A training step allocates and frees
tensors of a few to a few hundred MB in a different order every step (activations, the LM
head's logits of the trained positions, a packed micro-batch's sequences), so they land in the
heap, and a heap only shrinks from its top: one block still in use there pins everything below
it. Measured on the CPU recipe (SmolLM2-135M, 7 December 2026): a GRPO run's heap grew from 4.7
to 5.5 GB over its second and third steps (8.5 GB resident), and three such jobs on a 24 GiB
machine were killed by the kernel's out-of-memory killer; with the threshold fixed at 1 MiB a
run of the same recipe kept its heap at 0.7-1.8 GB over its first steps, the large tensors
coming and going as mappings of their own. The environment's own `MALLOC_MMAP_THRESHOLD_`
wins.

`keep_freed_memory` (the CTranslate2 query encoder): the opposite trade.
CTranslate2 allocates and frees its activation buffers on every forward. glibc serves blocks
above its mmap threshold (128 KiB, adapting up to 32 MiB) with fresh `mmap`s and trims the
heap on `free`, so each batch pays page faults again: encoding 400 passages took ~1 million
minor faults and as much system CPU time as the int8 matmuls themselves. Raising the mmap
and trim thresholds (`mallopt`) lets those blocks be reused; the process keeps its peak heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

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


RELEASE_THRESHOLD = 1 << 20
"""`release_freed_memory`: allocations of 1 MiB and more get their own mapping."""


def release_freed_memory() -> bool:
    """Fix glibc's mmap threshold at `RELEASE_THRESHOLD` (which also stops it growing), so
    freed tensors go back to the system; False where the C library is not glibc, the user
    set the threshold in the environment, or `keep_freed_memory` already raised it."""
    if _done or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, RELEASE_THRESHOLD))
