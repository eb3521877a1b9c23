"""Faults during training (the fast versions of `benchmarks/reliability/faults.py`): a training
process SIGKILLed and resumed matches an uninterrupted run bit for bit; a checkpoint that cannot be
written is one error line and leaves the previous one loadable; the retrieval server killed
mid-training and restarted, or answering slowly / with 500s / with garbage, costs bounded
waits, one log line per failed attempt, and at most the trajectories of the outage."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "reliability"))

from fault_harness import (
    ServerProcess,
    Setup,
    free_port,
    outage,
    prepare,
    searching_trainer,
    searchrl,
    steps_until,
    train_overrides,
)
from faults import check_after_kill, fingerprint
from flaky_retrieval import flaky_server
from searchrl.cli import app
from searchrl.train import checkpoint as ckpt

REMOTE_LOG = "searchrl.retrieval.remote"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Setup:
    from searchrl.models.loading import embedded_gguf_path

    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    return prepare(tmp_path_factory.mktemp("faults"), tokenizer_cache=cache)


def _train(setup: Setup, out: Path, steps: int) -> subprocess.Popen[str]:
    return searchrl("train", "--config", "tiny_cpu_grpo", "--out", str(out), "--resume",
                    *train_overrides(setup, steps))  # fmt: skip


def _wait_for_checkpoint(run: Path, step: int, proc: subprocess.Popen[str]) -> None:
    pointer = run / "checkpoints" / "LATEST"
    deadline = time.monotonic() + 300
    while not (pointer.is_file() and pointer.read_text().strip() >= f"step_{step:06d}"):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkilled_training_resumes_bit_for_bit(setup: Setup, tmp_path: Path) -> None:
    reference, run = tmp_path / "reference", tmp_path / "run"
    done = _train(setup, reference, 3)
    assert done.wait() == 0, done.stderr.read() if done.stderr else ""
    proc = _train(setup, run, 3)
    _wait_for_checkpoint(run, 1, proc)
    time.sleep(0.3)  # somewhere in step 2 (faults.py kills at random moments)
    proc.kill()
    proc.wait()
    assert check_after_kill(run) is None
    assert len(list((run / "checkpoints").glob("step_*"))) <= 2  # keep_checkpoints
    final = _train(setup, run, 3)
    assert final.wait() == 0, final.stderr.read() if final.stderr else ""
    assert fingerprint(run) == fingerprint(reference)


def test_a_checkpoint_that_cannot_be_written_is_one_line(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_save, calls = ckpt.torch.save, []

    def full_disk(obj: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(path)
        if len(calls) > 5:  # the second checkpoint (5 parts each) hits a full disk
            Path(path).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    out = tmp_path / "run"
    args = ["train", "--config", "tiny_cpu_grpo", "--out", str(out), *train_overrides(setup, 3)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: could not save checkpoint step_000002 in {out / 'checkpoints'}: no space left "
        "on device; step_000001 is intact"
    )
    assert "Traceback" not in result.stderr
    assert ckpt.latest_checkpoint(out / "checkpoints") == out / "checkpoints" / "step_000001"
    assert check_after_kill(out) is None
    assert not list((out / "checkpoints").glob(".tmp_*"))


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def remote_log() -> Any:
    handler = _Lines()
    logging.getLogger(REMOTE_LOG).addHandler(handler)
    yield handler.lines
    logging.getLogger(REMOTE_LOG).removeHandler(handler)


def _remote(url: str, retries: int, backoff: float, timeout: float = 5.0) -> list[str]:
    return ["data.retriever=remote", f"data.remote.url={url}", f"data.remote.retries={retries}",
            f"data.remote.backoff_s={backoff}", f"data.remote.timeout_s={timeout}"]  # fmt: skip


@pytest.mark.slow
def test_training_goes_on_through_a_retrieval_outage(
    setup: Setup, tmp_path: Path, remote_log: list[str]
) -> None:
    server = ServerProcess(setup.index, free_port(), tmp_path / "server.log")
    server.start()
    try:
        # A client whose retry window (0.2 + 0.4 s) is shorter than the outage: the searches
        # of the outage fail, only their trajectories, and training carries on.
        impatient = searching_trainer(setup, tmp_path / "a", _remote(server.url, 2, 0.2))
        with outage(server, after_s=1.0, down_s=3.0) as times:
            rows = steps_until(impatient, lambda: "restarted" in times, limit=500)
        after = steps_until(impatient, lambda: False, limit=2)
        failed = sum(r["failed"] for r in rows)
        assert failed > 0 and all(r["failed"] == 0 for r in after)
        assert sum("attempt" in line for line in remote_log) >= 2 * sum(
            r["failed"] > 0 for r in rows
        )
        for row in rows + after:  # the trainer leaves the failed trajectories' groups out
            assert row["metrics"]["train/dropped_failed"] >= row["failed"]
            if row["failed"] == row["trajectories"]:
                assert row["metrics"]["train/groups_trained"] == 0
        # A client whose window (0.5 + 1 + 2 + 4 s) outlasts the outage loses nothing.
        patient = searching_trainer(setup, tmp_path / "b", _remote(server.url, 4, 0.5))
        with outage(server, after_s=1.0, down_s=3.0) as times:
            rows = steps_until(patient, lambda: "restarted" in times, limit=500)
        assert sum(r["failed"] for r in rows) == 0 and len(rows) >= 2
    finally:
        server.kill()


@pytest.fixture(scope="module")
def flaky(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict]]:
    """One misbehaving server and one trainer searching it, shared by the fault modes."""
    with flaky_server(setup.index, "http500", slow_s=2.0) as (url, stats):
        out = tmp_path_factory.mktemp("flaky")
        yield searching_trainer(setup, out, _remote(url, 2, 0.1, timeout=0.5)), stats


@pytest.mark.parametrize("mode", ["slow", "http500", "garbage"])
def test_misbehaving_retrieval_is_retried_within_bounds(
    flaky: tuple[Any, dict], remote_log: list[str], mode: str
) -> None:
    trainer, stats = flaky
    stats.update(mode=mode, requests=0, faults=0)
    rows = steps_until(trainer, lambda: False, limit=2)
    assert stats["faults"] == 1 and stats["requests"] == 3
    assert sum(r["failed"] for r in rows) == 0
    assert len(remote_log) == 1 and "attempt 1/3 failed" in remote_log[0]
    bound = 3 * 0.5 + 0.1 * 3
    assert max(r["retrieval_s"] for r in rows) < bound
