"""`searchrl report RUN_DIR... --out report.html`: one self-contained HTML page of training
runs and evaluations found under the given folders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchrl.cli.common import ForceOption, require_dir


def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run or evaluation folders (searched).")],
    out: Annotated[Path, typer.Option("--out", help="HTML file to write.")] = Path("report.html"),
    max_trajectories: Annotated[
        int | None, typer.Option(help="Trajectories embedded per evaluation / run.", min=0)
    ] = None,
    force: ForceOption = False,
) -> None:
    """Training curves (Search-R1 Fig. 2 panels), evaluation tables with 95% intervals, the
    method comparison, the Table 2 grid and a trajectory viewer, in one file that works
    offline. An existing --out is replaced only with --force."""
    from searchrl.config.eval import ReportConfig
    from searchrl.report import write_report
    from searchrl.utils.output import check_output

    check_output(out, force=force)
    for folder in run_dirs:
        require_dir(folder, "run or evaluation folder")
    config = ReportConfig() if max_trajectories is None else ReportConfig(max_trajectories)
    path = write_report(run_dirs, out, config, force=force)
    typer.echo(f"report: {path.resolve()}")


def register(app: typer.Typer) -> None:
    """Attach this module's command to the top-level app."""
    app.command("report")(report)
