"""Collation from segment roles, log-prob alignment, and atomic checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.unit.train.fakes import tiny_llama

from searchrl.train import checkpoint as ckpt
from searchrl.train.collate import collate
from searchrl.train.logprobs import batched_logprobs, forward_logprobs
from searchrl.types import Trajectory


def _traj(prompt: list[int], *segments: tuple[str, list[int]]) -> Trajectory:
    t = Trajectory(id="t", question="q", golden_answers=["a"], prompt_ids=prompt)
    for role, ids in segments:
        t.append(role, "x", ids)  # type: ignore[arg-type]
    return t


def test_collate_layout_and_masks() -> None:
    a = _traj([1, 2], ("policy", [3, 4]), ("env", [5]), ("policy", [6]))
    b = _traj([7, 8, 9], ("policy", [10]))
    batch = collate([a, b], pad_id=0)
    assert batch.input_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]
    assert batch.position_ids[0].tolist() == [0, 0, 1, 2, 3, 4, 5]
    assert batch.response_ids.tolist() == [[3, 4, 5, 6], [10, 0, 0, 0]]
    assert batch.policy_mask.tolist() == [[1, 1, 0, 1], [1, 0, 0, 0]]
    assert batch.response_mask.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    trimmed = batch.select([1])
    assert trimmed.input_ids.tolist() == [[7, 8, 9, 10]]


def test_logprobs_match_a_plain_forward_and_ignore_padding() -> None:
    model = tiny_llama().eval()
    a = _traj([1, 2], ("policy", [3, 4]), ("env", [5]), ("policy", [6]))
    b = _traj([7, 8, 9], ("policy", [10, 11]))
    batch = collate([a, b], pad_id=0)
    padded = batched_logprobs(model, batch, micro_batch_size=2, temperature=1.0, bf16=False)
    alone = batched_logprobs(
        model, collate([b], 0), micro_batch_size=1, temperature=1.0, bf16=False
    )
    torch.testing.assert_close(padded[1, :2], alone[0], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        logits = model(torch.tensor([[7, 8, 9, 10, 11]])).logits.log_softmax(-1)
    direct = torch.stack([logits[0, 2, 10], logits[0, 3, 11]])
    torch.testing.assert_close(alone[0], direct, atol=1e-5, rtol=1e-5)
    logp, ent = forward_logprobs(model, collate([b], 0), 1.0, with_entropy="grad")
    assert ent is not None and ent.shape == logp.shape and bool((ent > 0).all())


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, {"trainer": {"step": step}}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000002", "step_000003"]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and ckpt.load_checkpoint(latest)["trainer"]["step"] == 3
    # A kill mid-write leaves only a hidden temporary: the previous checkpoint still loads.
    partial = tmp_path / ".tmp_step_000004_999"
    partial.mkdir()
    (partial / "policy.pt").write_bytes(b"truncated")
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step_000003"
    (tmp_path / ckpt.LATEST).unlink()
    assert ckpt.latest_checkpoint(tmp_path) == latest


def test_a_kill_while_pruning_leaves_no_half_deleted_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting an old checkpoint takes long enough for a SIGKILL to land mid-way (CI did:
    three `step_*` folders with keep=2). It used to leave a visible `step_*` folder with
    half its files; now the old one is renamed out of sight first."""
    for step in (1, 2):
        ckpt.save_checkpoint(tmp_path, step, {"trainer": {"step": step}, "policy": {}}, keep=2)
    real_rmtree = shutil.rmtree

    def killed_midway(path: Any, *args: Any, **kwargs: Any) -> None:
        victim = next(Path(path).glob("*.pt"), None)
        if victim is None:
            return real_rmtree(path, *args, **kwargs)
        victim.unlink()  # one file gone, then the process dies
        raise SystemExit(-9)

    monkeypatch.setattr(ckpt.shutil, "rmtree", killed_midway)
    with pytest.raises(SystemExit):
        ckpt.save_checkpoint(tmp_path, 3, {"trainer": {"step": 3}, "policy": {}}, keep=2)
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    visible = sorted(tmp_path.glob("step_*"))
    assert [p.name for p in visible] == ["step_000002", "step_000003"]
    assert all(sorted(q.name for q in p.iterdir()) == ["policy.pt", "trainer.pt"] for p in visible)
    ckpt.save_checkpoint(tmp_path, 4, {"trainer": {"step": 4}, "policy": {}}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step_000003", "step_000004"]


def test_resume_drops_later_rows_and_a_row_torn_by_a_kill(tmp_path: Path) -> None:
    """A SIGKILL while `metrics.jsonl` is appended leaves half a line; resuming from the step
    before it must not fail on it (it did: `json.loads` of the torn line)."""
    from searchrl.train.metrics import MetricsWriter

    writer = MetricsWriter(tmp_path, tensorboard=False, wandb_project="", config={})
    for step in (0, 1, 2):
        writer.write(step, {"reward/em": step / 10})
    log = tmp_path / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 3, "reward/e')
    writer.truncate_after(1)
    assert log.read_text().splitlines() == [
        '{"step": 0, "reward/em": 0.0}',
        '{"step": 1, "reward/em": 0.1}',
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temporary left
    writer.write(2, {"reward/em": 0.5})
    assert log.read_text().splitlines()[-1] == '{"step": 2, "reward/em": 0.5}'


def test_a_kill_just_after_the_new_checkpoint_appears_shows_at_most_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI again saw three `step_*` folders with keep=2: the kill landed after the new
    checkpoint was renamed into place and before the oldest was pruned. The oldest is now
    hidden before the new one appears; `LATEST` still names a complete checkpoint."""
    for step in (1, 2):
        ckpt.save_checkpoint(tmp_path, step, {"trainer": {"step": step}}, keep=2)
    real_replace = ckpt.os.replace

    def killed_at_latest(src: Any, dst: Any) -> None:
        if Path(dst).name == ckpt.LATEST:
            raise SystemExit(-9)  # the new folder is in place, LATEST not yet moved
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", killed_at_latest)
    with pytest.raises(SystemExit):
        ckpt.save_checkpoint(tmp_path, 3, {"trainer": {"step": 3}}, keep=2)
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000002", "step_000003"]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step_000002"
    assert ckpt.load_checkpoint(latest)["trainer"]["step"] == 2


def test_keep_zero_keeps_every_checkpoint(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, {"trainer": {"step": step}}, keep=0)
    assert len(list(tmp_path.glob("step_*"))) == 3
