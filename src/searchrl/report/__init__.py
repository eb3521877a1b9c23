"""report layer: `write_report(run_dirs, out)` turns training runs and evaluations into one
self-contained HTML page (training curves, evaluation tables with intervals, the method
comparison and a trajectory viewer). `searchrl report` and `searchrl demo` call it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from searchrl.config.eval import ReportConfig
from searchrl.utils.output import atomic_file, check_output


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    config: ReportConfig | None = None,
    *,
    force: bool = False,
) -> Path:
    """Write the report of everything found under `run_dirs` (training runs with
    `metrics.jsonl`, `searchrl eval` folders, at any depth) to `out`, whole or not at all;
    an existing `out` is replaced only with `force` (checked before any work). Returns its
    path."""
    from searchrl.report.build import build_report

    config = config or ReportConfig()
    out = check_output(Path(out), force=force)
    page = build_report([Path(d) for d in run_dirs], config)
    with atomic_file(out, force=force) as handle:
        handle.write(page)  # type: ignore[arg-type]
    return out


__all__ = ["write_report"]
