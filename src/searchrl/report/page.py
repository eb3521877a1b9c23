"""The report page: one self-contained HTML file. Styles, the viewer's script, the charts (inline
SVG) and the trajectories (a JSON block) are all inside it; it references no URL, so it works
offline from disk and can be mailed around.

Every string that comes from data is escaped here (`html.escape`) or, in the viewer, written
with `textContent`; the JSON block escapes `</` so no trajectory text can close the script.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from searchrl.eval.compare import compare_pairs, paired_rows
from searchrl.eval.stats import mean_ci, paired_test
from searchrl.eval.summary import set_order
from searchrl.report.collect import Evaluation, TrainingRun
from searchrl.report.grid import HEADERS, grid_rows

METRIC_COLUMNS = (
    ("em", "EM"),
    ("f1", "F1"),
    ("subem", "SubEM"),
    ("searches", "searches"),
    ("turns", "turns"),
    ("tokens", "tokens"),
    ("latency", "latency s"),
)


def _asset(name: str) -> str:
    return resources.files("searchrl.report").joinpath("assets", name).read_text("utf-8")


def esc(value: Any) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(value), quote=True)


def fmt_estimate(estimate: dict[str, Any] | None, digits: int = 3) -> str:
    """`mean [low, high]`."""
    if not estimate or estimate.get("mean") is None:
        return "–"
    mean, low, high = estimate["mean"], estimate["low"], estimate["high"]
    if low == high:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} <small>[{low:.{digits}f}, {high:.{digits}f}]</small>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _block_rows(blocks: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, block in blocks.items():
        cells = [esc(name), str(block.get("n", ""))]
        digits = {"searches": 2, "turns": 2, "tokens": 0, "latency": 2}
        cells += [fmt_estimate(block.get(k), digits.get(k, 3)) for k, _ in METRIC_COLUMNS]
        rows.append(cells)
    return rows


def runs_section(runs: Sequence[TrainingRun], panels: Sequence[tuple[str, str, str]]) -> str:
    """Training runs: a table and the Figure 2 panels."""
    if not runs:
        return '<section id="training"><h2>Training curves</h2><p>No training runs.</p></section>'
    rows = []
    for run in runs:
        last = run.rows[-1] if run.rows else {}
        evals = [r for r in run.rows if "val/em" in r]
        kind = "RL" if any("critic/score/mean" in r for r in run.rows) else "SFT"
        rows.append(
            [
                esc(run.label),
                kind,
                str(last.get("step", "–")),
                f"{last['critic/score/mean']:.3f}" if "critic/score/mean" in last else "–",
                f"{evals[0]['val/em']:.3f} → {evals[-1]['val/em']:.3f}" if evals else "–",
                esc(run.config.get("seed", "–")),
            ]
        )
    table = _table(
        ["run", "kind", "last step", "last train reward", "held-out EM (first → last)", "seed"],
        rows,
        "runs-table",
    )
    figures = "".join(
        f'<figure class="chart" data-metric="{esc(key)}"><figcaption>{esc(title)}</figcaption>'
        f"{svg}</figure>"
        for key, title, svg in panels
    )
    return (
        f'<section id="training"><h2>Training curves</h2>{table}'
        f'<div class="charts">{figures}</div></section>'
    )


def rl_gain_section(runs: Sequence[TrainingRun], resamples: int) -> str:
    """Held-out EM before and after RL for every run that evaluated both (its
    `eval_step_0.jsonl` and its last `eval_step_N.jsonl`): means with 95% intervals and the
    paired gain on the same questions (what `searchrl demo` prints)."""
    rows = []
    for run in runs:
        first = run.path / "trajectories" / "eval_step_0.jsonl"
        last = run.last_eval_trajectories
        if last is None or last == first or not first.is_file():
            continue
        before, after = _em_by_uid(first), _em_by_uid(last)
        uids = sorted(before.keys() & after.keys())
        if not uids:
            continue
        a, b = [after[u] for u in uids], [before[u] for u in uids]
        gain = paired_test(a, b, resamples, 0.95, 0).to_json()
        rows.append([
            esc(run.label), str(len(uids)),
            fmt_estimate(mean_ci(b, resamples, 0.95, 0).to_json()),
            fmt_estimate(mean_ci(a, resamples, 0.95, 0).to_json()),
            fmt_estimate({"mean": gain["diff"], "low": gain["low"], "high": gain["high"]}),
            f"{gain['wins']} / {gain['losses']}",
        ])  # fmt: skip
    if not rows:
        return ""
    headers = ["run", "questions", "EM before RL", "EM after RL", "paired gain", "won / lost"]
    return (
        '<section id="rl-gain"><h2>Held-out EM before and after RL</h2>'
        "<p>Greedy, the same held-out questions at the first and the last evaluation of each "
        "run; 95% bootstrap intervals.</p>"
        f"{_table(headers, rows, 'gain-table')}</section>"
    )


def _em_by_uid(path: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["uid"]: float(row.get("metrics", {}).get("em", 0.0)) for row in rows}


def evaluation_block(ev: Evaluation) -> str:
    """One evaluation: per set, overall and average; then by category, hops and searches."""
    summary = ev.summary
    headers = ["group", "n"] + [label for _, label in METRIC_COLUMNS]
    main = {**summary.get("by_set", {}), "overall": summary.get("overall", {})}
    average = summary.get("average", {})
    rows = _block_rows(main)
    if average:
        rows.append(
            ["average of sets", str(average.get("sets", ""))]
            + [fmt_estimate(average.get(k)) for k, _ in METRIC_COLUMNS]
        )
    parts = [
        f'<div class="evaluation" id="eval-{esc(ev.label)}"><h3>{esc(ev.label)}</h3>',
        f"<p>method <b>{esc(ev.method)}</b>, model <code>{esc(ev.model)}</code>, "
        f"{summary.get('n', len(ev.rows))} questions"
        + (f", <b>{summary['missing']} missing</b>" if summary.get("missing") else "")
        + "; 95% bootstrap intervals in brackets.</p>",
        _table(headers, rows, "eval-table"),
    ]
    for key, title in (
        ("by_category", "general vs multi-hop"),
        ("by_hops", "by hop count"),
        ("by_searches", "by number of searches"),
    ):
        if summary.get(key):
            table = _table(headers, _block_rows(summary[key]), "eval-table")
            parts.append(f"<details><summary>{esc(title)}</summary>{table}</details>")
    parts.append("</div>")
    return "".join(parts)


PAIRED_HEADERS = (
    "A",
    "B",
    "shared questions",
    "EM A − B, pooled [95% CI]",
    "A wins / B wins / ties",
    "sign-test p",
    "Avg. A − B over sets [95% CI]",
    "sign-flip p (Avg.)",
)


def _paired_rows(evals: Sequence[Evaluation], ref: Evaluation, resamples: int) -> list[list[str]]:
    """`ref` against every other evaluation, on the questions both answered."""
    rows = []
    for ev in evals:
        if ev is ref:
            continue
        pairs, _ = paired_rows(ref.rows, ev.rows)
        compared = compare_pairs(pairs, "em", resamples)
        result = compared.get("overall")
        if result is None:
            continue
        counts = f"{result['wins']} / {result['losses']} / {result['ties']}"
        labels = [esc(ref.label), esc(ev.label), str(result["n"])]
        row = [*labels, _diff(result), counts, f"{result['p_value']:.3g}"]
        average = compared.get("average")  # two or more sets: the papers' Avg.
        row += [_diff(average), f"{average['p_value']:.3g}"] if average else ["–", "–"]
        rows.append(row)
    return rows


def _diff(result: dict[str, Any]) -> str:
    return f"{result['diff']:+.3f} <small>[{result['low']:+.3f}, {result['high']:+.3f}]</small>"


def comparison_section(
    evals: Sequence[Evaluation], bars: str | None, reference: str, resamples: int
) -> str:
    """EM of every evaluation per set, the bar chart, and paired tests against a reference."""
    if not evals:
        return '<section id="comparison"><h2>Method comparison</h2><p>No evaluations.</p></section>'
    sets = sorted({s for e in evals for s in e.summary.get("by_set", {})}, key=set_order)
    rows = []
    for ev in evals:
        by_set = ev.summary.get("by_set", {})
        ems = [fmt_estimate(by_set.get(s, {}).get("em")) for s in sets]
        average = fmt_estimate(ev.summary.get("average", {}).get("em"))
        rows.append([esc(ev.label), esc(ev.method), *ems, average])
    table = _table(["evaluation", "method", *sets, "average"], rows, "comparison-table")
    chart = ""
    if bars:
        caption = "<figcaption>overall EM by evaluation (95% CI)</figcaption>"
        figure = f'<figure class="chart" data-metric="overall-em">{caption}{bars}</figure>'
        chart = f'<div class="charts">{figure}</div>'
    ref = next((e for e in evals if e.method == reference), evals[0])
    paired = _paired_rows(evals, ref, resamples)
    tests = (
        _table(PAIRED_HEADERS, paired, "paired-table") if paired else "<p>No shared questions.</p>"
    )
    return (
        f'<section id="comparison"><h2>Method comparison</h2>{table}{chart}'
        f"<h3>Paired tests on shared questions</h3>{tests}</section>"
    )


def grid_section(evals: Sequence[Evaluation]) -> str:
    """The papers' Table 2 over every evaluation found: EM per set with its 95% interval, the
    "Avg." over sets, general vs multi-hop, the world, searches per question."""
    rows = grid_rows(evals)
    if not rows:
        return ""
    columns = [c for c in HEADERS if any(c in r.cells for r in rows)]
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row.cells.get(column)
            cells.append(esc(value) if isinstance(value, str) else fmt_estimate(value))
        body.append([esc(row.method), esc(row.retriever), *cells])
    headers = ["method", "retriever", *(HEADERS[c] for c in columns)]
    note = (
        "<p>EM with its 95% interval (Wilson) per set; Avg. is the unweighted mean over the "
        "sets (the papers' column); general = NQ, TriviaQA, PopQA; multi-hop = the rest; world "
        "= the synthetic world's test split, 1-hop vs 2-4 hops.</p>"
    )
    table = _table(headers, body, "grid-table")
    return f'<section id="grid"><h2>Table 2 grid</h2>{note}{table}</section>'


def _finite(value: Any) -> Any:
    """`value` with every NaN or ±inf float as None: the viewer reads the JSON with the
    browser's `JSON.parse`, which refuses the `NaN`/`-Infinity` Python writes (a confidence
    discriminator's unscorable trajectory records log-odds −inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def viewer_section(records: Sequence[dict[str, Any]]) -> str:
    """Filters, the list and the detail pane; the viewer script fills them from the JSON."""
    data = json.dumps(_finite(list(records)), ensure_ascii=False, allow_nan=False)
    data = data.replace("</", "<\\/")
    return (
        '<section id="viewer"><h2>Trajectories</h2>'
        '<div class="filters">'
        '<label>source <select id="f-source"></select></label>'
        '<label>set <select id="f-set"></select></label>'
        '<label>hops <select id="f-hops"></select></label>'
        '<label>answer <select id="f-correct"><option value="">all</option>'
        '<option value="1">correct</option><option value="0">incorrect</option></select></label>'
        '<label>refined <select id="f-refined"><option value="">all</option>'
        '<option value="1">revised by the Meta-Refiner</option></select></label>'
        '<label>text <input id="f-text" type="search" placeholder="question contains…"></label>'
        '<span id="f-count"></span></div>'
        '<div class="viewer"><div class="list"><table id="traj-list"><thead><tr><th>source</th>'
        "<th>set</th><th>hops</th><th>EM</th><th>searches</th><th>question</th></tr></thead>"
        '<tbody></tbody></table></div><div id="traj-detail"><p>Pick a trajectory.</p></div></div>'
        f'<script type="application/json" id="traj-data">{data}</script></section>'
    )


def render_page(sections: Sequence[str], sources: Sequence[str]) -> str:
    """The whole document."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    listed = ", ".join(f"<code>{esc(s)}</code>" for s in sources)
    links = (
        ("training", "training"),
        ("grid", "Table 2 grid"),
        ("evaluations", "evaluations"),
        ("comparison", "comparison"),
        ("viewer", "trajectories"),
    )
    nav = "<nav>" + " · ".join(f'<a href="#{a}">{t}</a>' for a, t in links) + "</nav>"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>searchrl report</title><style>{_asset('report.css')}</style></head><body>"
        f"<header><h1>searchrl report</h1><p>{stamp} · from {listed}</p>{nav}</header>"
        + "".join(sections)
        + f"<script>{_asset('viewer.js')}</script></body></html>\n"
    )
