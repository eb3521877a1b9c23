"""`searchrl demo`: the whole pipeline on the embedded model, offline, in minutes on a CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.config.demo import DemoConfig
from searchrl.config.loading import load_config


def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder.")] = Path("runs/demo"),
    config: Annotated[
        Path | None, typer.Option("--config", help="Optional DemoConfig YAML.")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides, e.g. rl.steps=5 sft.epochs=0.4")
    ] = None,
) -> None:
    """World → BM25 → SFT warm start → GRPO → held-out EM before/after, curves, trajectories."""
    from searchrl.train.demo import run_demo

    run_demo(load_config(DemoConfig, config, overrides or []), out)


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("demo")(demo)
