"""report layer: `write_report(run_dirs, out)` turns training runs and evaluations into one
self-contained HTML page (training curves, evaluation tables with intervals, the method
comparison and a trajectory viewer). `searchrl report` and `searchrl demo` call it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from searchrl.config.eval import ReportConfig


def write_report(
    run_dirs: Sequence[str | Path], out: str | Path, config: ReportConfig | None = None
) -> Path:
    """Write the report of everything found under `run_dirs` (training runs with
    `metrics.jsonl`, `searchrl eval` folders, at any depth) to `out`; returns its path."""
    from searchrl.report.build import build_report

    config = config or ReportConfig()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(build_report([Path(d) for d in run_dirs], config), encoding="utf-8")
    tmp.replace(out)
    return out


__all__ = ["write_report"]
