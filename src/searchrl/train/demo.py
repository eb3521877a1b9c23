"""The whole story on a laptop CPU, offline: generate a world → index it (BM25) → SFT warm
start on reference trajectories → a few GRPO steps → held-out EM before and after RL.

Writes into the run folder: `world/`, `sft/` (model, metrics), `grpo/` (metrics.jsonl,
checkpoints, trajectories, model), `curves.png` and `summary.json`.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from searchrl.config.loading import to_dict
from searchrl.config.train import DemoConfig
from searchrl.data.world import generate_world, write_world
from searchrl.train.run import sft, train

COLUMNS = (
    ("EM", "val/em"),
    ("F1", "val/f1"),
    ("valid format", "val/format_valid"),
    ("searches / question", "val/searches"),
    ("response tokens", "val/response_length"),
)


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Rows of a `metrics.jsonl`."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(rows: list[dict[str, float]], out: Path) -> None:
    """Training reward, held-out EM, searches and response length per step (PNG, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("critic/score/mean", "train reward"),
        ("val/em", "held-out EM"),
        ("env/number_of_valid_search", "searches / trajectory"),
        ("response_length/mean", "response tokens"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (key, title) in zip(axes, panels, strict=True):
        points = [(r["step"], r[key]) for r in rows if key in r]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _table(before: dict[str, float], after: dict[str, float], n: int) -> Table:
    table = Table(title=f"Held-out questions (n={n}, greedy)")
    table.add_column("metric")
    table.add_column("after SFT (before RL)", justify="right")
    table.add_column("after GRPO", justify="right")
    for label, key in COLUMNS:
        table.add_row(label, f"{before.get(key, 0.0):.3f}", f"{after.get(key, 0.0):.3f}")
    return table


def run_demo(config: DemoConfig, out: Path, console: Console | None = None) -> dict[str, Any]:
    """Run every stage into `out`; returns the summary also written to `summary.json`."""
    console = console or Console()
    start = time.perf_counter()
    timings: dict[str, float] = {}
    out.mkdir(parents=True, exist_ok=True)

    console.rule("1/4 world + BM25 index")
    world_dir = out / "world"
    tick = time.perf_counter()
    if not (world_dir / "manifest.json").is_file():
        world = generate_world(config.world)
        manifest = write_world(world, world_dir)
        console.print(f"world: {manifest['passages']} passages, {manifest['questions']} questions")
    timings["world_s"] = time.perf_counter() - tick

    console.rule("2/4 SFT warm start on reference trajectories")
    tick = time.perf_counter()
    summary_path = out / "sft" / "summary.json"
    if summary_path.is_file():  # a rerun reuses a finished warm start
        sft_result = json.loads(summary_path.read_text())
    else:
        sft_cfg = replace(config.sft, data=replace(config.sft.data, world_dir=str(world_dir)))
        sft_result = sft(sft_cfg, out / "sft")
    timings["sft_s"] = time.perf_counter() - tick
    console.print(
        f"SFT: {int(sft_result['sft/examples'])} examples, loss {sft_result['sft/loss']:.3f}"
    )

    console.rule("3/4 GRPO (evaluates before and after)")
    tick = time.perf_counter()
    rl = config.rl
    rl_cfg = replace(
        rl,
        data=replace(rl.data, world_dir=str(world_dir)),
        policy=replace(rl.policy, init_checkpoint=str(out / "sft" / "model")),
    )
    train(rl_cfg, out / "grpo")
    timings["grpo_s"] = time.perf_counter() - tick

    console.rule("4/4 results")
    rows = read_metrics(out / "grpo" / "metrics.jsonl")
    before = next(r for r in rows if r["step"] == 0)
    after = [r for r in rows if "val/em" in r][-1]
    plot_curves(rows, out / "curves.png")
    console.print(_table(before, after, rl_cfg.data.eval_size))
    timings["total_s"] = time.perf_counter() - start
    summary = {
        "before_rl": {k: before.get(k) for _, k in COLUMNS},
        "after_rl": {k: after.get(k) for _, k in COLUMNS},
        "train_reward": [r.get("critic/score/mean") for r in rows if r["step"] > 0],
        "timings": timings,
        "config": to_dict(config),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"curves: {out / 'curves.png'}  trajectories: {out / 'grpo' / 'trajectories'}")
    console.print(f"wall time: {timings['total_s'] / 60:.1f} min")
    return summary
