"""`searchrl report RUN_DIR... --out report.html`: one self-contained HTML page of training
runs and evaluations found under the given folders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.cli.common import ForceOption, require_dir
from searchrl.cli.options import ConfigOption, SetOption, joined, settings, split_overrides
from searchrl.config.eval import ReportConfig


def report(
    run_dirs: Annotated[
        list[str],
        typer.Argument(
            help="Run or evaluation folders (searched); key=value arguments among them are "
            "settings (`searchrl config show report`).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="HTML file to write.")] = Path("report.html"),
    max_trajectories: Annotated[
        int | None, typer.Option(help="Trajectories embedded per evaluation / run.", min=0)
    ] = None,
    force: ForceOption = False,
    config: ConfigOption = None,
    sets: SetOption = None,
) -> None:
    """Training curves (Search-R1 Fig. 2 panels), evaluation tables with 95% intervals, the
    method comparison, the Table 2 grid and a trajectory viewer, in one file that works
    offline. An existing --out is replaced only with --force."""
    from searchrl.report import write_report
    from searchrl.utils.output import check_output

    names, overrides = split_overrides(run_dirs, ReportConfig)
    built = settings(
        ReportConfig, config, joined(sets, overrides), {"max_trajectories": max_trajectories}
    )
    check_output(out, force=force)
    folders = [require_dir(Path(name), "run or evaluation folder") for name in names]
    if not folders:
        raise typer.BadParameter("give at least one run or evaluation folder")
    path = write_report(folders, out, built, force=force)
    typer.echo(f"report: {path.resolve()}")


def register(app: typer.Typer) -> None:
    """Attach this module's command to the top-level app."""
    app.command("report")(report)
