"""Two CPU processes train one FSDP-sharded model over gloo: the same whole weights on every
rank after a step, and an exact resume from a sharded checkpoint."""

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
def test_fsdp_ranks_agree_and_resume_from_a_sharded_checkpoint(tmp_path: Path) -> None:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("accelerate launcher not installed")
    paths = os.pathsep.join([str(REPO), str(REPO / "src")])  # this checkout, not an install
    env = {**os.environ, "PYTHONPATH": paths, "OMP_NUM_THREADS": "1"}
    cmd = [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29534",
           str(REPO / "tests" / "integration" / "train_fsdp_worker.py"), str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=False)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=False)
    assert r0["world"] == r1["world"] == 2
    assert r0["sharded"] and r1["sharded"], "each rank must hold only a shard"
    assert not set(r0["seen"]) & set(r1["seen"]), "ranks must roll out different prompts"
    for key in r0["after_one"]:
        assert torch.equal(r0["after_one"][key], r1["after_one"][key]), key
    assert any(not torch.equal(r0["initial"][k], r0["after_one"][k]) for k in r0["initial"])
    # the engine's fingerprint of the sharded weights: the same on every rank (so every rank
    # takes the same decision to sync, a collective gather), unchanged until a step writes
    assert r0["versions"] == r1["versions"]
    assert r0["versions"][0] == r0["versions"][1] != r0["versions"][2]
    # the weights a sync reads from the sharded module are the whole, updated weights
    embeddings = r0["after_one"]["model.embed_tokens.weight"]
    assert torch.equal(r0["synced_embeddings"], embeddings)
    assert torch.equal(r1["synced_embeddings"], embeddings)
    # the checkpoint holds one shard file per rank and the step's small parts
    assert {"__0_0.distcp", "__1_0.distcp", "scheduler.pt", "trainer.pt"} <= set(r0["files"])
    for rank in (r0, r1):
        for key in rank["after_one"]:
            assert torch.equal(rank["restored"][key], rank["after_one"][key]), key
            assert torch.equal(rank["resumed_two"][key], rank["after_two"][key]), key
