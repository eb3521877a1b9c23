"""`searchrl demo`: the whole pipeline on the embedded model, offline, in minutes on a CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.cli.options import ConfigOption, OverridesArgument, SetOption, joined
from searchrl.cli.options import settings as build_settings
from searchrl.config.checks import MAX_SEED
from searchrl.config.demo import DemoConfig
from searchrl.utils.output import check_output


def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder.")] = Path("runs/demo"),
    config: ConfigOption = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", min=0, max=MAX_SEED, help="Seed of the world, the SFT and the RL run."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Start afresh: delete the stages an earlier demo left in --out (without it, a "
            "rerun reuses every stage made with the same settings and refuses other ones).",
        ),
    ] = False,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """World → BM25 → SFT warm start → GRPO → held-out EM before/after, curves, trajectories."""
    flags = {"world.seed": seed, "sft.seed": seed, "rl.seed": seed}
    settings = build_settings(DemoConfig, config, joined(sets, overrides), flags)
    from searchrl.train.demo import run_demo
    from searchrl.train.demo_stages import check_stages, clear_stages

    check_output(out, force=True, kind="directory")  # a file in the way, an unwritable parent
    if force:
        clear_stages(out)
    check_stages(settings, out)
    run_demo(settings, out)


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("demo")(demo)
