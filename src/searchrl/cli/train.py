"""`searchrl train` (PPO / GRPO) and `searchrl sft`: parse the preset and overrides, check the
paths they name and the run folder, then call one function in `searchrl.train.run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.cli.common import ForceOption, InputError, require_dir
from searchrl.config.loading import load_config
from searchrl.config.sft import SFTConfig
from searchrl.config.train import DataConfig, PolicyConfig, TrainConfig
from searchrl.utils.output import check_output

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
    known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
    raise typer.BadParameter(f"no config file or preset named {name!r} (presets: {known})")


DATA_DOCS = "docs/data.md#the-papers-data"
"""Where the paper presets' files are described (download steps)."""


def check_sources(data: DataConfig, policy: PolicyConfig) -> None:
    """The files and directories a config points at must exist before minutes of model
    loading, and before a world is generated in their place: one line names the first one
    missing (the paper presets name files a user downloads first)."""
    from searchrl.data.sources import missing_input

    for specs, key in ((data.train_files, "data.train_files"), (data.val_files, "data.val_files")):
        missing = missing_input(specs, key)
        if missing:
            raise InputError(f"{missing} (how to get the papers' data: {DATA_DOCS})")
    if data.world_dir:
        require_dir(Path(data.world_dir), "data.world_dir")
    index = Path(data.index_dir) if data.index_dir and data.retriever != "remote" else None
    if index is not None and not (index / "manifest.json").is_file():
        raise InputError(
            f"data.index_dir: {index} not found or not an index (no manifest.json; "
            f"build one with `searchrl index`, see {DATA_DOCS})"
        )
    if policy.init_checkpoint:
        require_dir(Path(policy.init_checkpoint), "policy.init_checkpoint")


def train(
    config: ConfigOption,
    out: OutOption,
    resume: Annotated[
        bool, typer.Option(help="Continue from the last checkpoint in --out.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start a fresh run in a non-empty --out folder.")
    ] = False,
    overrides: Overrides = None,
) -> None:
    """RL training (Search-R1 PPO or GRPO) with retrieved-token masking."""
    settings = load_config(TrainConfig, resolve_preset(config), overrides or [])
    check_sources(settings.data, settings.policy)
    check_output(out, force=force or resume, kind="directory")
    from searchrl.train.checkpoint import latest_checkpoint
    from searchrl.train.run import exit_ranks
    from searchrl.train.run import train as run_train

    if resume and latest_checkpoint(out / "checkpoints") is None:
        typer.echo(f"note: no checkpoint in {out / 'checkpoints'}; starting at step 0", err=True)
    metrics = run_train(settings, out, resume=resume)
    shown = {k: round(v, 4) for k, v in metrics.items() if k.startswith(("val/", "critic/score"))}
    typer.echo(f"done: {out} {shown}")
    exit_ranks()


def sft(config: ConfigOption, out: OutOption, force: ForceOption = False,
        overrides: Overrides = None) -> None:  # fmt: skip
    """Supervised warm start on reference (or rejection-sampled) trajectories."""
    settings = load_config(SFTConfig, resolve_preset(config), overrides or [])
    check_sources(settings.data, settings.policy)
    check_output(out, force=force, kind="directory")
    from searchrl.train.run_sft import sft as run_sft

    result = run_sft(settings, out)
    typer.echo(f"done: {out / 'model'} { ({k: round(v, 4) for k, v in result.items()}) }")


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("train")(train)
    app.command("sft")(sft)
