"""`searchrl train` (PPO / GRPO) and `searchrl sft`: parse the preset and overrides, check the
paths they name and the run folder, then call one function in `searchrl.train.run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from searchrl.cli.common import ForceOption, InputError, require_dir
from searchrl.cli.options import (
    IndexOption,
    ModelOption,
    OverridesArgument,
    ResumeOption,
    SeedOption,
    SetOption,
    UrlOption,
    joined,
    resolve_model,
    settings,
)
from searchrl.config.sft import SFTConfig
from searchrl.config.train import DataConfig, PolicyConfig, TrainConfig
from searchrl.utils.output import check_output

ConfigOption = Annotated[
    str,
    typer.Option(
        "--config", help="A shipped preset by name (e.g. tiny_cpu_grpo; `searchrl config list`) "
        "or a YAML file of settings.",
    ),
]  # fmt: skip
OutOption = Annotated[Path, typer.Option("--out", help="Run folder (metrics, checkpoints, model).")]
DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print each rank's GPU memory plan for the GPUs `plan.*` names and "
        "exit (1 when it cannot fit): reads the model's config.json only, no weights, no data.",
    ),
]  # fmt: skip


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


def _flags(seed: int | None, model: str | None, index: Path | None, url: str | None) -> dict:
    """The shared options as settings of a train or SFT config."""
    flags: dict[str, Any] = {"seed": seed, "model.name_or_path": resolve_model(model)}
    if index is not None and url is not None:
        raise typer.BadParameter("give at most one of --index DIR or --url URL")
    if index is not None:
        flags["data.index_dir"] = str(index)
    if url is not None:
        flags.update({"data.retriever": "remote", "data.remote.url": url})
    return flags


def train(
    config: ConfigOption,
    out: Annotated[
        Path | None, typer.Option("--out", help="Run folder (metrics, checkpoints, model).")
    ] = None,
    dry_run: DryRunOption = False,
    resume: ResumeOption = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start a fresh run in a non-empty --out folder.")
    ] = False,
    seed: SeedOption = None,
    model: ModelOption = None,
    index: IndexOption = None,
    url: UrlOption = None,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """RL training (Search-R1 PPO or GRPO) with retrieved-token masking."""
    flags = _flags(seed, model, index, url)
    run = settings(TrainConfig, config, joined(sets, overrides), flags)
    if dry_run:
        from searchrl.train.memory_plan import PlanDoesNotFit, dry_run_plan

        plan = dry_run_plan(run)
        typer.echo(plan.table())
        if not plan.fits:
            raise PlanDoesNotFit(plan.verdict())
        return
    if out is None:
        raise typer.BadParameter("--out DIR is required (the run folder), unless --dry-run")
    check_sources(run.data, run.policy)
    check_output(out, force=force or resume, kind="directory")
    from searchrl.train.checkpoint import latest_checkpoint
    from searchrl.train.run import exit_ranks
    from searchrl.train.run import train as run_train

    if resume and latest_checkpoint(out / "checkpoints") is None:
        typer.echo(f"note: no checkpoint in {out / 'checkpoints'}; starting at step 0", err=True)
    metrics = run_train(run, out, resume=resume)
    shown = {k: round(v, 4) for k, v in metrics.items() if k.startswith(("val/", "critic/score"))}
    typer.echo(f"done: {out} {shown}")
    exit_ranks()


def sft(
    config: ConfigOption,
    out: OutOption,
    resume: ResumeOption = False,
    force: ForceOption = False,
    seed: SeedOption = None,
    model: ModelOption = None,
    index: IndexOption = None,
    url: UrlOption = None,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Supervised warm start on reference (or rejection-sampled) trajectories."""
    flags = _flags(seed, model, index, url)
    run = settings(SFTConfig, config, joined(sets, overrides), flags)
    check_sources(run.data, run.policy)
    check_output(out, force=force or resume, kind="directory")
    from searchrl.train.run_sft import sft as run_sft

    result = run_sft(run, out, resume=resume)
    typer.echo(f"done: {out / 'model'} { ({k: round(v, 4) for k, v in result.items()}) }")


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("train")(train)
    app.command("sft")(sft)
