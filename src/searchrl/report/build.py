"""Collect, chart and render: the steps behind `write_report`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from searchrl.config.eval import ReportConfig
from searchrl.report.charts import method_bars, training_panels
from searchrl.report.collect import discover, trajectory_records
from searchrl.report.page import (
    comparison_section,
    evaluation_block,
    grid_section,
    render_page,
    rl_gain_section,
    runs_section,
    viewer_section,
)


def build_report(roots: Sequence[Path], config: ReportConfig) -> str:
    """The HTML text of the report for `roots`."""
    runs, evals = discover(roots)
    gain = rl_gain_section(runs, config.bootstrap_resamples)
    evaluations = "".join(evaluation_block(ev) for ev in evals)
    if not evaluations:  # the held-out evaluations of training runs are shown above
        evaluations = "<p>No `searchrl eval` folders.</p>" if gain else "<p>No evaluations.</p>"
    sections = [
        runs_section(runs, training_panels(runs)),
        gain,
        grid_section(evals),
        f'<section id="evaluations"><h2>Evaluations</h2>{evaluations}</section>',
        comparison_section(
            evals, method_bars(evals), config.reference_method, config.bootstrap_resamples
        ),
        viewer_section(trajectory_records(runs, evals, config.max_trajectories)),
    ]
    return render_page(sections, [str(r) for r in roots])
