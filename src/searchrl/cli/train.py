"""`searchrl train` (PPO / GRPO) and `searchrl sft`: parse the preset and overrides, call one
function in `searchrl.train.run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.config.loading import load_config
from searchrl.config.train import SFTConfig, TrainConfig

PRESETS_DIR = Path(__file__).resolve().parents[3] / "configs"

ConfigOption = Annotated[
    str, typer.Option("--config", help="Preset name in configs/ (e.g. tiny_cpu_grpo) or a path.")
]
OutOption = Annotated[Path, typer.Option("--out", help="Run folder (metrics, checkpoints, model).")]
Overrides = Annotated[
    list[str] | None, typer.Argument(help="key=value overrides, e.g. algo.kl_coef=0.01 steps=5")
]


def resolve_preset(name: str) -> Path:
    """A path as given, else `configs/<name>.yaml` (cwd first, then the source checkout)."""
    for candidate in (Path(name), Path("configs") / f"{name}.yaml", PRESETS_DIR / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    raise typer.BadParameter(f"no config file or preset named {name!r}")


def train(
    config: ConfigOption,
    out: OutOption,
    resume: Annotated[
        bool, typer.Option(help="Continue from the last checkpoint in --out.")
    ] = False,
    overrides: Overrides = None,
) -> None:
    """RL training (Search-R1 PPO or GRPO) with retrieved-token masking."""
    from searchrl.train.run import train as run_train

    settings = load_config(TrainConfig, resolve_preset(config), overrides or [])
    metrics = run_train(settings, out, resume=resume)
    shown = {k: round(v, 4) for k, v in metrics.items() if k.startswith(("val/", "critic/score"))}
    typer.echo(f"done: {out} {shown}")


def sft(config: ConfigOption, out: OutOption, overrides: Overrides = None) -> None:
    """Supervised warm start on reference (or rejection-sampled) trajectories."""
    from searchrl.train.run import sft as run_sft

    settings = load_config(SFTConfig, resolve_preset(config), overrides or [])
    result = run_sft(settings, out)
    typer.echo(f"done: {out / 'model'} { ({k: round(v, 4) for k, v in result.items()}) }")


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("train")(train)
    app.command("sft")(sft)
