"""A killed command leaves no vLLM engine behind: SIGTERM reaches the exit hooks that shut it
down (runs without vLLM), and after SIGKILL the backend's reaper stops it (needs vLLM)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.models.vllm_backend import vllm_available
from searchrl.utils.reaper import POLL_S, descendants, start_time

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


def _owner(
    script: str, tmp_path: Path, tokenizer: PreTrainedTokenizerBase
) -> subprocess.Popen[str]:
    """A command that starts an engine (`script`, run with a saved tokenizer's folder)."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    return subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "tokenizer")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def _kill_and_wait(owner: subprocess.Popen[str], pids: Iterable[int], folders: list[Path]) -> None:
    """SIGKILL the owner, then give its reaper up to 60 s to stop `pids` and remove `folders`."""
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        any(start_time(pid) is not None for pid in pids) or any(f.exists() for f in folders)
    ):
        time.sleep(0.2)


SIGKILLED_ENGINE_OWNER = """
import os, sys, time
import torch
from transformers import AutoTokenizer
from searchrl.config.model import ModelConfig
from searchrl.models.generation import SamplingParams
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend
from searchrl.utils.reaper import descendants

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
config = ModelConfig(vllm_kv_cache_gib=0.25, vllm_enforce_eager=True, vllm_block_size=32,
                     vllm_process="separate")
module = tiny_model(tokenizer, hidden_size=128, num_layers=2, seed=0)
backend = VLLMBackend.from_module(module, tokenizer, config, dtype="float32", max_model_len=256)
prompt = tokenizer.encode("The capital of France is", add_special_tokens=False)
candidates = [[[t] for t in range(0, 49152, 768)]]

def follows() -> bool:  # the engine's log-probs are the module's (the shared-buffer sync)
    with torch.no_grad():
        want = torch.log_softmax(module(torch.tensor([prompt])).logits[0, -1], -1)
    got = torch.tensor(backend.score([prompt], candidates)[0])
    return torch.allclose(got, want[[c[0] for c in candidates[0]]], atol=2e-3, rtol=1e-4)

synced = follows()
with torch.no_grad():
    for name, param in module.named_parameters():
        param.mul_(1.5 if "norm" in name else -1.0)
synced = synced and backend.sync_weights(module) and follows()
print("SYNCED", synced, flush=True)
print("ENGINE", *descendants(os.getpid()), flush=True)
print("SCRATCH", *backend._scratch, flush=True)
time.sleep(300)
"""


@pytest.mark.slow
@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_a_sigkilled_command_leaves_no_engine_behind(
    tmp_path: Path, tokenizer: PreTrainedTokenizerBase
) -> None:
    """An OOM-killed training run (SIGKILL: no exit hook runs) left its CPU engine core and
    worker holding 4.3 GB for 15 minutes, and its weights in /dev/shm: the backend's reaper
    stops them and removes the copy once the command is gone. (An engine in the command's own
    process dies with it; this is the engine in processes of its own, which overlapped
    training and distributed ranks use.) Before the kill, the owner checks that this engine
    follows its weights through the shared RAM buffer, every parameter changed."""
    owner = _owner(SIGKILLED_ENGINE_OWNER, tmp_path, tokenizer)
    assert owner.stdout is not None
    said = {}
    for line in owner.stdout:  # vLLM logs to stdout too
        kind, *items = line.split() or [""]
        said[kind] = items
        if kind == "SCRATCH":
            break
    assert said["SYNCED"] == ["True"]
    engine = [int(pid) for pid in said["ENGINE"]]
    scratch = [Path(folder) for folder in said["SCRATCH"]]
    alive = [pid for pid in engine if start_time(pid) is not None]
    assert alive and scratch and all(folder.is_dir() for folder in scratch)
    _kill_and_wait(owner, alive, scratch)
    assert [pid for pid in alive if start_time(pid) is not None] == []
    assert [folder for folder in scratch if folder.exists()] == []


KILLED_WHILE_STARTING_OWNER = """
import sys
from transformers import AutoTokenizer
from searchrl.config.model import ModelConfig
from searchrl.models import vllm_backend
from searchrl.models.loading import tiny_model

made = vllm_backend.scratch_dir
def scratch_dir(prefix):
    folder = made(prefix)
    print("SCRATCH", folder, flush=True)
    return folder
vllm_backend.scratch_dir = scratch_dir

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
config = ModelConfig(vllm_kv_cache_gib=0.25, vllm_enforce_eager=True, vllm_block_size=32,
                     vllm_process="separate")
module = tiny_model(tokenizer, hidden_size=128, num_layers=2, seed=0)
vllm_backend.VLLMBackend.from_module(module, tokenizer, config, dtype="float32", max_model_len=256)
print("STARTED", flush=True)
"""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_a_command_killed_while_its_engine_starts_leaves_no_engine_behind(
    tmp_path: Path, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The reaper used to be told the engine's pids once `vllm.LLM` had returned: a command
    killed during the start (the OOM killer strikes as weights load) left a half-started engine
    and its weight copy behind. Killed as soon as its engine core exists, it leaves neither."""
    owner = _owner(KILLED_WHILE_STARTING_OWNER, tmp_path, tokenizer)
    assert owner.stdout is not None
    scratch = Path(next(line for line in owner.stdout if line.startswith("SCRATCH")).split()[1])
    deadline = time.monotonic() + 120
    while not any("EngineCore" in _cmdline(pid) for pid in descendants(owner.pid)):
        assert time.monotonic() < deadline and owner.poll() is None
        time.sleep(0.05)
    time.sleep(5 * POLL_S)  # the watcher's polls see the new processes
    started = {p for p in descendants(owner.pid) if "searchrl.utils.reaper" not in _cmdline(p)}
    _kill_and_wait(owner, started, [scratch])
    assert [pid for pid in started if start_time(pid) is not None] == []
    assert not scratch.exists()
    assert "STARTED" not in owner.stdout.read()  # it was killed mid-start (read once all exit)
