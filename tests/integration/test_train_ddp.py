"""Two CPU processes (accelerate launch, DDP over gloo) agree on the weights after a step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_processes_agree_after_a_step(tmp_path: Path) -> None:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("accelerate launcher not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    # `--multi_gpu` selects the torchrun launcher; with no GPU visible the ranks run on the CPU
    # over gloo (`--cpu` would start a single process).
    cmd = [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29533",
           str(REPO / "tests" / "integration" / "train_ddp_worker.py"), str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=False)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=False)
    assert r0["world"] == r1["world"] == 2
    assert not set(r0["seen"]) & set(r1["seen"]), "ranks must roll out different prompts"
    # DDP broadcasts rank 0's weights at wrap time, then averages gradients every update.
    for key, value in r0["after"].items():
        assert torch.equal(value, r1["after"][key]), key
    assert any(not torch.equal(r0["initial"][k], r0["after"][k]) for k in r0["after"])
