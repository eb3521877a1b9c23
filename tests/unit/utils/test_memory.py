"""Every command lets freed tensors go back to the system: after `release_freed_memory`, a
block of a few MB gets a mapping of its own even once a larger block was freed (which makes
glibc's default threshold climb and serve such blocks from a heap that cannot shrink)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import sys, torch
from searchrl.utils.memory import release_freed_memory
if sys.argv[1] == "release":
    assert release_freed_memory()
def heap_kb():
    kb, name = 0, ""
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5:
            name = parts[5] if len(parts) > 5 else ""
        elif parts[0] == "Rss:" and name == "[heap]":
            kb += int(parts[1])
    return kb
warm = torch.ones(5_000_000); del warm  # a 20 MB block freed: the default threshold climbs
before = heap_kb()
blocks = [torch.ones(500_000) for _ in range(50)]  # 50 blocks of 2 MB
print((heap_kb() - before) // 1024)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
@pytest.mark.parametrize(("mode", "grows"), [("default", True), ("release", False)])
def test_freed_blocks_leave_the_heap(mode: str, grows: bool) -> None:
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    heap_growth_mb = int(out.stdout.strip())
    assert (heap_growth_mb > 50) is grows, heap_growth_mb


def test_the_environment_s_threshold_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from searchrl.utils.memory import release_freed_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert release_freed_memory() is False
