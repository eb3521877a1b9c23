"""SIGTERM reaches the exit hooks that shut a vLLM engine down (runs without vLLM)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SIGTERM_RUNS_EXIT_HOOKS = """
import atexit, pathlib, sys, time
from searchrl.models.vllm_backend import exit_on_sigterm

exit_on_sigterm()
atexit.register(lambda: pathlib.Path(sys.argv[1]).write_text("closed"))
print("up", flush=True)
time.sleep(60)
"""


def test_a_killed_command_still_runs_the_engine_shutdown(tmp_path: Path) -> None:
    """A training run stopped with `kill` left vLLM's engine processes running (4 GB, for 49
    minutes): SIGTERM skipped the exit hook that closes the engine. Needs no vLLM: the hook is
    the backend's `close`, this checks that SIGTERM reaches exit hooks at all."""
    marker = tmp_path / "closed"
    child = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_RUNS_EXIT_HOOKS, str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 128 + signal.SIGTERM
    assert marker.read_text() == "closed"
