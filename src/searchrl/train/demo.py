"""The whole story on a laptop CPU, offline: generate a world → index it (BM25) → SFT warm
start on reference trajectories → a few GRPO steps → held-out EM before and after RL, with
95% bootstrap intervals and the paired RL gain, per hop count → an HTML report.

Writes into the run folder: `world/`, `sft/` (model, metrics), `grpo/` (metrics.jsonl,
checkpoints, trajectories, `model/` = the trained policy), `curves.png`, `summary.json` and
`report.html`. A rerun into the same folder reuses every finished stage.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from searchrl.config.demo import DEMO_DIFFERENCES, RECIPE, DemoConfig
from searchrl.config.loading import to_dict
from searchrl.config.train import TrainConfig
from searchrl.data.benchmarks import load_flashrag_jsonl
from searchrl.data.world import generate_world, write_world
from searchrl.data.world.leakage import leakage
from searchrl.eval.stats import mean_ci, paired_test
from searchrl.report import write_report
from searchrl.train.environment import read_question_ids
from searchrl.train.run import train
from searchrl.train.run_sft import sft

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
        ("probe/pass@1", "probe pass@1 (T = 1)"),
        ("probe/pass@k", "probe pass@k (T = 1)"),
        ("val/em", "held-out EM (greedy)"),
        ("env/number_of_valid_search", "searches / trajectory"),
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


def signal_summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    """What RL was given to learn from (`train.signal`): informative groups trained (and
    sampled, per hour), how far the policy moved, and the probe's pass@1/pass@k at
    temperature 1 before and after."""
    steps = [r for r in rows if r["step"] > 0 and "signal/trained_total" in r]
    last = steps[-1] if steps else {}
    probes = [r for r in rows if "probe/pass@1" in r]
    out: dict[str, Any] = {
        "informative_groups": last.get("signal/trained_total", 0.0),
        "sampled_groups": last.get("signal/sampled_total", 0.0),
        "informative_per_hour": last.get("signal/informative_per_hour", 0.0),
        "moved": last.get("signal/moved", 0.0),
        "moved_rel": last.get("signal/moved_rel", 0.0),
    }
    if probes:
        out["probe"] = {key: [probes[0].get(f"probe/{key}"), probes[-1].get(f"probe/{key}")]
                        for key in ("pass@1", "pass@k")}  # fmt: skip
        out["probe"]["kl"] = probes[-1].get("signal/probe_kl")
    return out


def _signal_line(found: dict[str, Any]) -> str:
    line = (
        f"RL's signal: {found['informative_groups']:.0f} informative groups trained (of "
        f"{found['sampled_groups']:.0f} sampled, {found['informative_per_hour']:.0f} an "
        f"hour), moved ‖θ − θ₀‖ = {found['moved']:.3g} ({found['moved_rel']:.1e} of ‖θ₀‖)"
    )
    probe = found.get("probe")
    if probe:
        (a1, b1), (ak, bk) = probe["pass@1"], probe["pass@k"]
        line += f"; probe at temperature 1: pass@1 {a1:.3f} → {b1:.3f}, pass@k {ak:.3f} → {bk:.3f}"
    return line


def _scores(path: Path) -> dict[str, float]:
    """uid → EM of each trajectory in a held-out evaluation file."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["uid"]: float(row["metrics"].get("em", 0.0)) for row in rows}


def held_out_gain(
    before: dict[str, float], after: dict[str, float], hops: dict[str, int | None], seed: int
) -> dict[str, Any]:
    """EM before and after RL on the same questions: means with 95% bootstrap intervals, the
    paired gain with its interval and sign-test p-value, and EM per hop count."""
    uids = sorted(before.keys() & after.keys())
    a, b = [after[u] for u in uids], [before[u] for u in uids]
    gain = paired_test(a, b, resamples=4000, confidence=0.95, seed=seed)
    by_hops: dict[str, dict[str, float]] = {}
    for h in sorted({hops.get(u) for u in uids}, key=lambda x: (x is None, x)):
        members = [u for u in uids if hops.get(u) == h]
        by_hops[str(h)] = {
            "n": len(members),
            "before": sum(before[u] for u in members) / len(members),
            "after": sum(after[u] for u in members) / len(members),
        }
    return {
        "n": len(uids),
        "em_before": mean_ci(b, 4000, 0.95, seed).to_json(),
        "em_after": mean_ci(a, 4000, 0.95, seed).to_json(),
        "gain": gain.to_json(),
        "em_by_hops": by_hops,
    }


def _table(result: dict[str, Any], before: dict[str, float], after: dict[str, float]) -> Table:
    table = Table(title=f"Held-out questions (n={result['n']}, greedy) — 95% bootstrap intervals")
    table.add_column("metric")
    table.add_column("after SFT (before RL)", justify="right")
    table.add_column("after GRPO", justify="right")

    def interval(est: dict[str, float]) -> str:
        return f"{est['mean']:.3f} [{est['low']:.3f}, {est['high']:.3f}]"

    table.add_row("EM", interval(result["em_before"]), interval(result["em_after"]))
    for hop, row in result["em_by_hops"].items():
        table.add_row(
            f"  EM, {hop}-hop (n={row['n']})", f"{row['before']:.3f}", f"{row['after']:.3f}"
        )
    for label, key in COLUMNS[1:]:
        table.add_row(label, f"{before.get(key, 0.0):.3f}", f"{after.get(key, 0.0):.3f}")
    gain = result["gain"]
    table.caption = (
        f"RL gain {gain['diff']:+.3f} EM, 95% CI [{gain['low']:+.3f}, {gain['high']:+.3f}] "
        f"(paired bootstrap; {gain['wins']} questions won, {gain['losses']} lost, "
        f"sign test p = {gain['p_value']:.2g})"
    )
    return table


def _world_and_sft(
    config: DemoConfig, out: Path, console: Console
) -> tuple[Path, dict[str, float]]:
    """Stages 1-2, each reused when a previous run of this folder finished it."""
    console.rule("1/3 world + BM25 index")
    world_dir = out / "world"
    if not (world_dir / "manifest.json").is_file():
        manifest = write_world(generate_world(config.world), world_dir)
        console.print(f"world: {manifest['passages']} passages, {manifest['questions']} questions")
    console.rule("2/3 SFT warm start on reference trajectories")
    summary_path = out / "sft" / "summary.json"
    if summary_path.is_file():
        result = json.loads(summary_path.read_text())
    else:
        sft_cfg = replace(config.sft, data=replace(config.sft.data, world_dir=str(world_dir)))
        result = sft(sft_cfg, out / "sft")
    speed = (
        f", {result['sft/tokens_per_s']:.0f} tokens/s ({result['sft/loss_tokens_per_s']:.0f} in "
        "the loss)"
        if "sft/tokens_per_s" in result
        else ""
    )
    console.print(
        f"SFT: {int(result['sft/examples'])} examples, loss {result['sft/loss']:.3f}{speed}"
    )
    return world_dir, result


def _explain_rl(config: TrainConfig, world_dir: Path, sft_dir: Path, console: Console) -> None:
    """What the RL stage is: the recipe and where the demo departs from it (and why), and how
    much of what the held-out questions need the warm start was trained on (0 in worlds with
    `held_out_facts: disjoint`)."""
    changes = "; ".join(
        f"{key} {_value(config, key)} (recipe {recipe}: {why})"
        for key, (recipe, _, why) in DEMO_DIFFERENCES.items()
    )
    console.print(f"RL: the CPU recipe ({RECIPE}), except {changes}.")
    held_out = load_flashrag_jsonl(world_dir / f"{config.data.eval_split}.jsonl", "world")
    trained_ids = read_question_ids(sft_dir)
    train = load_flashrag_jsonl(world_dir / f"{config.data.train_split}.jsonl", "world")
    trained = [q for q in train if q.uid in trained_ids]
    measured = leakage(held_out[: config.data.eval_size], trained)
    console.print(
        f"held-out questions with a hop fact stated in the warm start's references: "
        f"{measured['questions_any_hop_stated']:.0%} (every hop: "
        f"{measured['questions_all_hops_stated']:.0%})"
    )


def _value(config: object, key: str) -> object:
    for part in key.split("."):
        config = getattr(config, part)
    return config


def run_demo(config: DemoConfig, out: Path, console: Console | None = None) -> dict[str, Any]:
    """Run every stage into `out`; returns the summary also written to `summary.json`."""
    console = console or Console()
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    world_dir, _ = _world_and_sft(config, out, console)
    timings = {"world_and_sft_s": time.perf_counter() - start}

    console.rule("3/3 GRPO, held-out evaluation before and after")
    tick = time.perf_counter()
    rl = config.rl
    data = replace(rl.data, world_dir=str(world_dir), exclude_trained_by=str(out / "sft"))
    rl_cfg = replace(
        rl, data=data, policy=replace(rl.policy, init_checkpoint=str(out / "sft" / "model"))
    )
    _explain_rl(rl_cfg, world_dir, out / "sft", console)
    grpo = out / "grpo"
    train(rl_cfg, grpo, resume=(grpo / "checkpoints").is_dir())
    timings["grpo_s"] = time.perf_counter() - tick

    rows = read_metrics(grpo / "metrics.jsonl")
    before_row = next(r for r in rows if r["step"] == 0)
    after_row = [r for r in rows if "val/em" in r][-1]
    evals = grpo / "trajectories"
    hops = {
        q.uid: q.hops
        for q in load_flashrag_jsonl(world_dir / f"{rl_cfg.data.eval_split}.jsonl", "world")
    }
    result = held_out_gain(
        _scores(evals / "eval_step_0.jsonl"),
        _scores(evals / f"eval_step_{int(after_row['step'])}.jsonl"),
        hops,
        rl_cfg.seed,
    )
    plot_curves(rows, out / "curves.png")
    console.print(_table(result, before_row, after_row))
    console.print(_signal_line(signal_summary(rows)))
    report = write_report([out], out / "report.html", force=True)  # its own page, redone
    timings["total_s"] = time.perf_counter() - start
    summary = {
        **result,
        **signal_summary(rows),
        "model": str(grpo / "model"),
        "before_rl": {k: before_row.get(k) for _, k in COLUMNS},
        "after_rl": {k: after_row.get(k) for _, k in COLUMNS},
        "train_reward": [r.get("critic/score/mean") for r in rows if r["step"] > 0],
        "timings": timings,
        "config": to_dict(config),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"policy: {grpo / 'model'}  report: {report}  curves: {out / 'curves.png'}")
    console.print(
        "on a world it never saw: searchrl world --seed 7 --out W && searchrl index --kind bm25 "
        f"--corpus W/corpus.jsonl --out W_bm25 && searchrl eval --method search-r1 --model "
        f"{grpo / 'model'} --data W/test.jsonl --index W_bm25 --out E "
        "--set rollout.max_turns=5 --set rollout.force_answer=true"
    )
    console.print(f"wall time: {timings['total_s'] / 60:.1f} min")
    return summary
