"""An engine's scratch copy in RAM does not outlive a killed run (runs without vLLM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from searchrl.config.model import ModelConfig
from searchrl.models import scratch
from searchrl.models.vllm_backend import VLLMBackend

PREFIX = "searchrl-vllm-"
MAKE_SCRATCH_THEN_WAIT = """
import sys, time
from pathlib import Path
from searchrl.models.scratch import scratch_dir

(scratch_dir("searchrl-vllm-", Path(sys.argv[1])) / "model.safetensors").write_bytes(b"w")
print("up", flush=True)
time.sleep(60)
"""


def _start_owner(parent: Path) -> subprocess.Popen[str]:
    """A process that makes a scratch directory under `parent`, then waits to be killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", MAKE_SCRATCH_THEN_WAIT, str(parent)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    return child


def test_a_sigkilled_runs_copy_is_removed_by_the_next_engine_start(tmp_path: Path) -> None:
    """A SIGKILLed run cannot remove its weights from /dev/shm: thirty such copies had piled up
    here in a day. The next scratch directory of the same kind removes them; a live owner's
    stays."""
    killed, live = _start_owner(tmp_path), _start_owner(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        before = sorted(tmp_path.glob(f"{PREFIX}*"))
        assert len(before) == 2 and all((d / "model.safetensors").exists() for d in before)
        mine = scratch.scratch_dir(PREFIX, tmp_path)
        after = set(tmp_path.glob(f"{PREFIX}*"))
    finally:
        live.kill()
        live.wait(timeout=30)
    owners = {d: scratch._owner(d) for d in before}
    survivors = {d for d, owner in owners.items() if owner and owner[0] == live.pid}
    assert after == survivors | {mine}
    assert len(survivors) == 1
    assert scratch._owner(mine) == (os.getpid(), scratch._pid_namespace())


def test_folders_it_cannot_judge_are_kept(tmp_path: Path) -> None:
    """No owner record (another program's folder, or one being created), an owner in another
    PID namespace (a container sharing /dev/shm), or another prefix: never removed."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    unrecorded = tmp_path / f"{PREFIX}unrecorded"
    unrecorded.mkdir()
    elsewhere = tmp_path / f"{PREFIX}elsewhere"
    elsewhere.mkdir()
    (elsewhere / scratch.OWNER_FILE).write_text(f"{dead_pid} pid:[1]\n")
    other_kind = tmp_path / "searchrl-tokenizer-x"
    other_kind.mkdir()
    (other_kind / scratch.OWNER_FILE).write_text(f"{dead_pid} {scratch._pid_namespace()}\n")
    orphan = tmp_path / f"{PREFIX}orphan"
    orphan.mkdir()
    (orphan / scratch.OWNER_FILE).write_text(f"{dead_pid} {scratch._pid_namespace()}\n")

    assert scratch.remove_orphans(PREFIX, tmp_path) == [orphan]
    assert unrecorded.is_dir() and elsewhere.is_dir() and other_kind.is_dir()


def test_an_engine_that_fails_to_start_leaves_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny: torch.nn.Module, tokenizer: object
) -> None:
    """An engine in processes of its own gets its RAM buffer for the weights before vLLM
    starts; one that failed to start left its copy in RAM for good (its `close`, which
    removes it, never existed)."""
    from searchrl.models import vllm_backend, vllm_engine

    made: list[Path] = []

    def scratch_here(prefix: str) -> Path:
        made.append(scratch.scratch_dir(prefix, tmp_path))
        return made[-1]

    def fail(*_args: object, **_kwargs: object) -> VLLMBackend:
        assert made[-1].is_dir()
        raise RuntimeError("engine core initialization failed")

    monkeypatch.setattr(vllm_backend, "scratch_dir", scratch_here)
    monkeypatch.setattr(vllm_backend, "start_apart", fail)
    monkeypatch.setattr(vllm_backend, "import_vllm", lambda: None)
    monkeypatch.setattr(vllm_backend, "on_cpu", lambda: True)
    apart = vllm_engine.Placement(True, in_process=False, several_ranks=False, gpu=0, sleeps=False)
    monkeypatch.setattr(vllm_backend, "placement", lambda *a, **k: apart)
    monkeypatch.setattr(vllm_engine, "_cache_root", lambda: tmp_path / "cache")
    config = ModelConfig(vllm_process="separate")
    with pytest.raises(RuntimeError, match="initialization failed"):
        VLLMBackend.from_module(tiny, tokenizer, config, dtype="float32", max_model_len=64)
    assert len(made) == 1 and not made[0].exists()
