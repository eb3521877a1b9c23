"""The interactive commands' default model: the newest trained model under runs/, said in one
line, or the base model with a one-line warning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from searchrl.cli.common import newest_trained_model
from searchrl.cli.rollout import _default_model
from searchrl.config.model import ModelConfig


def _model(path: Path, mtime: float) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    os.utime(path / "config.json", (mtime, mtime))
    return path


def test_newest_model_of_any_run_is_chosen(tmp_path: Path) -> None:
    assert newest_trained_model(tmp_path / "runs") is None
    _model(tmp_path / "runs" / "demo" / "sft" / "model", 100)
    grpo = _model(tmp_path / "runs" / "demo" / "grpo" / "model", 300)
    _model(tmp_path / "runs" / "old" / "model", 200)
    (tmp_path / "runs" / "half" / "model").mkdir(parents=True)  # no config.json: not a model
    assert newest_trained_model(tmp_path / "runs") == grpo


def test_default_model_says_what_it_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    console = Console(record=True, width=200)
    assert _default_model(ModelConfig(), False, console) == ModelConfig()
    said = console.export_text()
    assert said.count("\n") == 1 and "base model was never taught to use <search>" in said
    trained = _model(tmp_path / "runs" / "demo" / "grpo" / "model", 100)
    chosen = _default_model(ModelConfig(), False, console)
    assert chosen.name_or_path == str(Path("runs") / "demo" / "grpo" / "model")
    assert (tmp_path / chosen.name_or_path).resolve() == trained.resolve()
    assert _default_model(ModelConfig(name_or_path="x"), True, console).name_or_path == "x"
