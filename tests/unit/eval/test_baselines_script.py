"""`benchmarks/eval/baselines.py` keeps one generation engine resident: a grid runs the embedded
model and several checkpoints in one process, and every vLLM engine left open holds a worker
process and its whole KV cache."""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "eval"))

import baselines
from baselines import OnePolicy
from searchrl.config.data import world_preset
from searchrl.data.world import generate_world, write_world


class Backend:
    def __init__(self, model: str, events: list[str]):
        self.model, self.events = model, events

    def close(self) -> None:
        self.events.append(f"close {self.model}")


class Policy:
    def __init__(self, backend: Backend):
        self.backend = backend


def test_switching_models_closes_the_previous_engine_before_loading_the_next() -> None:
    events: list[str] = []

    def load(model: str) -> Policy:
        events.append(f"load {model}")
        return Policy(Backend(model, events))

    policy = OnePolicy(load)
    first = policy("embedded")
    assert policy("embedded") is first  # the cells of one model share one load
    second = policy("runs/sft/model")
    assert second.backend.model == "runs/sft/model"
    policy("embedded")
    policy.close()
    policy.close()  # nothing left to close
    assert events == [
        "load embedded",
        "close embedded",
        "load runs/sft/model",
        "close runs/sft/model",
        "load embedded",
        "close embedded",
    ]


def test_a_backend_without_close_is_released_by_reference() -> None:
    loads: list[str] = []
    policy = OnePolicy(lambda model: loads.append(model) or object())
    policy("a")
    policy("b")
    policy.close()
    assert loads == ["a", "b"] and policy.policy is None and policy.model is None


def test_a_cell_another_process_is_writing_is_skipped_and_the_grid_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several invocations may share OUT: one that meets a cell in progress (its writer lock
    held) leaves it to its writer and goes on, instead of dying with a traceback."""
    world = tmp_path / "world"
    write_world(generate_world(world_preset("test")), world)
    out = tmp_path / "out"
    held = []
    for cell in ("world-none-direct", "world-none-cot"):
        (out / "evals" / cell).mkdir(parents=True)
        handle = (out / "evals" / cell / ".lock").open("w")
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running writer holds
        held.append(handle)
    argv = ["baselines.py", "--out", str(out), "--world", str(world), "--data", "world",
            "--methods", "direct,cot", "--world-limit", "3"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    baselines.main()  # no model is loaded: both cells are taken before any question runs
    printed = capsys.readouterr().out
    assert "world-none-direct: skipped, another process is evaluating it" in printed
    assert "world-none-cot: skipped, another process is evaluating it" in printed
    assert not (out / "evals" / "world-none-direct" / "samples.jsonl").exists()
    assert (out / "table.md").read_text().startswith("No evaluations.")
    for handle in held:
        handle.close()
