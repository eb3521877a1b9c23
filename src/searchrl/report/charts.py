"""Charts as inline SVG strings (matplotlib's SVG backend, text kept as text), so the page
needs no script library and no network.

Training curves follow Search-R1's Figure 2 panels; runs in one seed group are drawn as their
mean with a min–max band.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from searchrl.report.collect import Evaluation, TrainingRun

PANELS = (
    ("critic/score/mean", "train reward"),
    ("response_length/mean", "response length (tokens)"),
    ("env/number_of_valid_search", "valid searches / trajectory"),
    ("actor/kl_loss", "KL to reference"),
    ("actor/entropy_loss", "entropy"),
    ("val/em", "held-out EM"),
    ("probe/pass@1", "probe pass@1 (temperature 1)"),
    ("probe/pass@k", "probe pass@k (temperature 1)"),
    ("signal/trained_total", "informative groups trained"),
    ("signal/moved", "distance moved ‖θ − θ₀‖"),
    ("signal/probe_kl", "KL(π₀ ‖ π) on the probe"),
)
"""(metric key, title) of each training panel: Search-R1 Figure 2's quantities, then the
learning signal (`train.signal`): what RL optimises at temperature 1, how many informative
groups it was trained on, how far it moved."""

SFT_PANEL = ("sft/loss", "SFT loss (warm start)")
"""Drawn too when a run folder is an SFT run."""

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "searchrl", "font.size": 9})
    return plt


def _svg(fig: Any, name: str) -> str:
    """The figure as an `<svg>` element for inline use: no XML prolog, no RDF metadata block
    and no namespace declarations (HTML parses inline SVG without them), so the page holds no
    URL at all; element ids get the prefix `name` so figures on one page never share an id."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    prefix = re.sub(r"\W", "-", name) + "-"
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", text)
    return re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', text)


def _series(run: TrainingRun, key: str) -> tuple[np.ndarray, np.ndarray]:
    points = sorted((r["step"], r[key]) for r in run.rows if key in r and "step" in r)
    if not points:
        return np.array([]), np.array([])
    steps, values = zip(*points, strict=True)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def _group_curve(members: Sequence[TrainingRun], key: str) -> tuple[np.ndarray, ...] | None:
    """Steps, mean, min and max over the seeds of a group, on the steps all of them have."""
    series = [_series(run, key) for run in members]
    series = [s for s in series if s[0].size]
    if not series:
        return None
    common = sorted(set.intersection(*(set(s[0].tolist()) for s in series)))
    if not common:
        return None
    stacked = np.stack([np.interp(common, s[0], s[1]) for s in series])  # [seeds, steps]
    return np.asarray(common), stacked.mean(0), stacked.min(0), stacked.max(0)


def _group_label(members: Sequence[TrainingRun]) -> str:
    """A single run's label; for seeds, their common prefix + `*` and the seed count."""
    if len(members) == 1:
        return members[0].label
    prefix = members[0].label
    for member in members[1:]:
        while not member.label.startswith(prefix):
            prefix = prefix[:-1]
    return f"{prefix}* ({len(members)} seeds)"


def training_panels(runs: Sequence[TrainingRun]) -> list[tuple[str, str, str]]:
    """(metric key, title, svg) for each Figure 2 panel some run has data for."""
    groups: dict[str, list[TrainingRun]] = defaultdict(list)
    for run in runs:
        groups[run.group].append(run)
    plt = _pyplot()
    panels = []
    for key, title in (*PANELS, SFT_PANEL):
        fig, ax = plt.subplots(figsize=(4.2, 2.8))
        drawn = False
        for index, members in enumerate(groups.values()):
            curve = _group_curve(members, key)
            if curve is None:
                continue
            steps, mean, low, high = curve
            color = _COLORS[index % len(_COLORS)]
            label = _group_label(members)
            ax.plot(
                steps,
                mean,
                color=color,
                marker="o" if len(steps) < 12 else None,
                markersize=3,
                label=label,
            )
            if len(members) > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        panels.append((key, title, _svg(fig, f"panel-{key}")))
    return panels


def method_bars(evals: Sequence[Evaluation]) -> str | None:
    """Overall EM of each evaluation with its 95% interval."""
    shown = [e for e in evals if "overall" in e.summary]
    if not shown:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(shown) + 2), 3.0))
    means = [e.summary["overall"]["em"]["mean"] for e in shown]
    lows = [m - e.summary["overall"]["em"]["low"] for m, e in zip(means, shown, strict=True)]
    highs = [e.summary["overall"]["em"]["high"] - m for m, e in zip(means, shown, strict=True)]
    positions = np.arange(len(shown))
    ax.bar(positions, means, yerr=[lows, highs], capsize=3, color="#4c78a8")
    ax.set_xticks(positions, [e.label for e in shown], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("EM (95% CI)")
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig, "methods")
