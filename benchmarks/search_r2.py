"""Search-R2 evidence on the synthetic world: the paper's ablation rows, two simple baselines it
never ran, the Meta-Refiner's knobs at evaluation, and its per-step overhead.

    python benchmarks/search_r2.py --out runs/search_r2 --seeds 0 1
    python benchmarks/search_r2.py --out runs/search_r2 --seeds 0 1 --summarize   # table + PNG

Per seed: a 1-3-hop world (test split of `--test` questions) → BM25 index → one SFT warm start
(`searchrl sft --config tiny_cpu_sft meta_examples=…`: the Actor's references plus world-labelled
refiner examples) → from that same checkpoint, `--steps` RL steps of every arm, all from the
preset `tiny_cpu_search_r2` with switches, so batch, lr and budgets are identical:

| arm | what changes |
|---|---|
| `r1_g` | Search-R1: no refiner, EM reward, G samples |
| `r1_2g` | Search-R1 with 2G samples (the paper's "more samples" control) |
| `refiner` | + Meta-Refiner, trained on reasoning traces only, EM reward |
| `process` | + the gated hybrid reward's process term (oracle judge) |
| `full` | full Search-R2: + joint optimization of the refiner's decisions |
| `random_cut` | `refiner` with a uniformly random cut (`refiner.trimmer=random`) |
| `rule_disc` | `refiner` with the rule discriminator (`refiner.discriminator=rule`) |

Each arm is evaluated on the held-out split (`searchrl eval`, greedy): Search-R1 arms with
`--method search-r1`, refiner arms with `--method search-r2` (τ = 0, N_max = 1, the arm's own
switches). The full model is also evaluated at τ ∈ {−1, 1} and N_max ∈ {2, 3}, and without the
refiner (`search-r1`), and the warm start itself. Every stage is a CLI call whose output folder
marks it done, so a killed benchmark resumes where it stopped (training resumes from its last
checkpoint). Per-step overhead of Search-R2 over Search-R1 at equal G comes from the two arms'
`timing_s/step` in metrics.jsonl (with and without the diagnostic probes, which the paper does
not run).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from stages import HOPS, ROLLOUT, call, searchrl

R1 = ("refiner.enabled=false", "refiner.joint=false", "reward.kind=em")
TRACES_ONLY = ("refiner.joint=false", "reward.kind=em")
ARMS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # arm: (label, training overrides, refiner switches also used at evaluation)
    "r1_g": ("Search-R1 (G)", R1, ()),
    "r1_2g": ("Search-R1 (2G)", R1, ()),
    "refiner": ("+ Meta-Refiner", TRACES_ONLY, ()),
    "process": ("+ process reward", ("refiner.joint=false",), ()),
    "full": ("full Search-R2 (joint)", (), ()),
    "random_cut": ("random-cut refiner", TRACES_ONLY, ("refiner.trimmer=random",)),
    "rule_disc": ("rule discriminator", TRACES_ONLY, ("refiner.discriminator=rule",)),
}
SWEEP = {  # full model at evaluation: stage → (τ, N_max); τ = 0, N_max = 1 is `eval_full`
    "eval_full_tau-1": (-1.0, 1),
    "eval_full_tau1": (1.0, 1),
    "eval_full_n2": (0.0, 2),
    "eval_full_n3": (0.0, 3),
}
STAGES = ("world", "sft", "eval_sft", *ARMS, *(f"eval_{a}" for a in ARMS), "eval_full_r1",
          *SWEEP)  # fmt: skip


class Seed:
    """The stages of one seed, each skipped when its output exists."""

    def __init__(self, root: Path, seed: int, args: argparse.Namespace):
        self.dir = root / f"seed{seed}"
        self.seed = seed
        self.args = args
        self.dir.mkdir(parents=True, exist_ok=True)
        self.times_path = self.dir / "times.json"
        self.times: dict[str, float] = (
            json.loads(self.times_path.read_text()) if self.times_path.is_file() else {}
        )

    def _world(self) -> list[list[str]]:
        world, index = self.dir / "world", self.dir / "world_bm25"
        size = [f"hop_weights={HOPS}", f"test_questions={self.args.test}",
                f"train_questions={self.args.train}",
                f"num_entities={self.args.entities}"]  # fmt: skip
        corpus = str(world / "corpus.jsonl")
        return [
            searchrl("world", "--seed", str(self.seed), "--out", str(world), *size),
            searchrl("index", "--kind", "bm25", "--corpus", corpus, "--out", str(index)),
        ]

    def _sft(self) -> list[list[str]]:
        options = [f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}",
                   f"max_examples={self.args.sft_examples}",
                   f"meta_examples={self.args.meta_examples}"]  # fmt: skip
        out = ["--out", str(self.dir / "sft"), "--force"]
        return [searchrl("sft", "--config", "tiny_cpu_sft", *out, *options, *self.args.sft_set)]

    def _train(self, arm: str) -> list[list[str]]:
        group = 2 * self.args.group if arm == "r1_2g" else self.args.group
        start = [f"policy.init_checkpoint={self.dir / 'sft' / 'model'}",
                 f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}"]  # fmt: skip
        run = [f"steps={self.args.steps}", f"batch_size={self.args.batch}",
               f"mini_batch_size={self.args.batch}", f"n_samples={group}", "data.eval_size=0",
               "logging.progress=false", "logging.tensorboard=false"]  # fmt: skip
        _, overrides, switches = ARMS[arm]
        out = ["--out", str(self.dir / arm), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_search_r2", *out, *start, *run,
                         *overrides, *switches, *self.args.set)]  # fmt: skip

    def _eval(self, model: Path, name: str, method: str, refiner: Sequence[str]) -> list[list[str]]:
        sets = [f"--set={o}" for o in (*ROLLOUT, *refiner)]
        data, index = self.dir / "world" / "test.jsonl", self.dir / "world_bm25"
        return [searchrl("eval", "--method", method, "--model", str(model), "--data", str(data),
                         "--index", str(index), "--out", str(self.dir / name), *sets)]  # fmt: skip

    def commands(self, stage: str) -> tuple[Path, list[list[str]]]:
        """(marker whose existence means done, the commands of the stage)."""
        d = self.dir
        if stage == "world":
            return d / "world_bm25" / "manifest.json", self._world()
        if stage == "sft":
            return d / "sft" / "model" / "config.json", self._sft()
        if stage in ARMS:
            return d / stage / "model" / "config.json", self._train(stage)
        marker = d / stage / "summary.json"
        if stage == "eval_sft":
            return marker, self._eval(d / "sft" / "model", stage, "search-r1", ())
        if stage == "eval_full_r1":
            return marker, self._eval(d / "full" / "model", stage, "search-r1", ())
        if stage in SWEEP:
            tau, n_max = SWEEP[stage]
            knobs = (f"refiner.margin={tau}", f"refiner.max_revisions={n_max}")
            return marker, self._eval(d / "full" / "model", stage, "search-r2", knobs)
        arm = stage.removeprefix("eval_")
        method = "search-r1" if arm.startswith("r1_") else "search-r2"
        return marker, self._eval(d / arm / "model", stage, method, ARMS[arm][2])

    def run(self, stage: str, threads: int) -> None:
        marker, commands = self.commands(stage)
        if marker.exists():
            return
        seconds = sum(call(cmd, self.dir / f"{stage}.log", threads) for cmd in commands)
        self.times[stage] = self.times.get(stage, 0.0) + seconds
        self.times_path.write_text(json.dumps(self.times, indent=2) + "\n")


def run_all(root: Path, args: argparse.Namespace) -> None:
    """Every stage of every seed, one after another, with one progress bar and an ETA."""
    seeds = [Seed(root, s, args) for s in args.seeds]
    todo = [(s, st) for s in seeds for st in STAGES if not s.commands(st)[0].exists()]
    columns = (TextColumn("search-r2"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.description}"))  # fmt: skip
    with Progress(*columns) as progress:
        task = progress.add_task("", total=len(todo))
        for seed, stage in todo:
            progress.update(task, description=f"seed {seed.seed}: {stage}")
            seed.run(stage, args.threads)
            progress.advance(task)


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _em(summary: dict[str, Any] | None, hops: int | None = None) -> float | None:
    """Overall EM (or EM of one hop stratum) of a `searchrl eval` summary."""
    if summary is None:
        return None
    if hops is None:
        return summary["overall"]["em"]["mean"]
    stratum = summary.get("by_hops", {}).get(str(hops))
    return None if stratum is None else stratum["em"]["mean"]


def _revised(folder: Path) -> float | None:
    """Share of an evaluation's trajectories the Meta-Refiner revised (None: no refiner)."""
    records = [r["trajectory"].get("refinement") for r in _rows(folder / "samples.jsonl")]
    records = [r for r in records if r]
    return sum(bool(r["revised"]) for r in records) / len(records) if records else None


def _mean_std(values: Sequence[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "–"
    if len(found) == 1:
        return f"{found[0]:.3f}"
    return f"{statistics.fmean(found):.3f} ± {statistics.stdev(found):.3f}"


def _train_means(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = [m[key] for m in metrics if m.get("step", 0) > 0 and key in m]
    return statistics.fmean(values) if values else None


def _overhead(root: Path, seeds: Sequence[int]) -> list[str]:
    """Seconds per RL step, Search-R2 (full) against Search-R1 at equal G, from metrics.jsonl,
    by stage: generation, the refiner's reading and regeneration, the diagnostic probes (not
    in the paper), the update (joint optimization adds one meta row per decision)."""
    lines = ["| seed | R1 s/step (gen / update) | R2 s/step (gen / refine / probes / update) | "
             "overhead | overhead without probes |",
             "|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        r1 = _rows(root / f"seed{seed}" / "r1_g" / "metrics.jsonl")
        r2 = _rows(root / f"seed{seed}" / "full" / "metrics.jsonl")
        base, step = _train_means(r1, "timing_s/step"), _train_means(r2, "timing_s/step")
        if base is None or step is None:
            continue
        probes = _train_means(r2, "refiner/probe_s") or 0.0
        parts_r1 = [_train_means(r1, k) or 0.0 for k in ("timing_s/gen", "timing_s/update_actor")]
        parts_r2 = [_train_means(r2, "timing_s/gen") or 0.0,
                    _train_means(r2, "refiner/refine_s") or 0.0, probes,
                    _train_means(r2, "timing_s/update_actor") or 0.0]  # fmt: skip
        lines.append(f"| {seed} | {base:.0f} ({' / '.join(f'{x:.0f}' for x in parts_r1)}) | "
                     f"{step:.0f} ({' / '.join(f'{x:.0f}' for x in parts_r2)}) | "
                     f"{step / base - 1:+.0%} | {(step - probes) / base - 1:+.0%} |")  # fmt: skip
    return lines


def _diagnostics(root: Path, seeds: Sequence[int]) -> list[str]:
    """The refiner's training diagnostics per arm, averaged over steps and seeds."""
    keys = ("refiner/revision_rate", "refiner/accept_rate", "refiner/revision_wrong_to_right",
            "refiner/revision_right_to_wrong", "refiner/a_prec", "refiner/s_trim",
            "critic/score/mean")  # fmt: skip
    lines = ["| arm | " + " | ".join(k.removeprefix("refiner/") for k in keys) + " |",
             "|---|" + "---|" * len(keys)]  # fmt: skip
    for arm, (label, _, _) in ARMS.items():
        if arm.startswith("r1_"):
            continue
        runs = [_rows(root / f"seed{s}" / arm / "metrics.jsonl") for s in seeds]
        cells = [_mean_std([_train_means(run, k) for run in runs if run]) for k in keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def summarize(root: Path, seeds: Sequence[int]) -> str:
    """Markdown tables (EM per arm and hop, the evaluation sweep, training diagnostics,
    overhead) into `summary.md`, and `search_r2.png`."""
    evals = [("SFT warm start", "eval_sft", "search-r1"),
             *((label, f"eval_{arm}", "search-r1" if arm.startswith("r1_") else "search-r2")
               for arm, (label, _, _) in ARMS.items()),
             ("full model, refiner off at eval", "eval_full_r1", "search-r1")]  # fmt: skip
    lines = [f"Seeds: {', '.join(map(str, seeds))}. EM on the held-out split, mean ± std over "
             "seeds (one seed: the value).", "",
             "| model | eval method | EM | 1-hop | 2-hop | 3-hop | revised at eval |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, stage, method in evals:
        found = [_json(root / f"seed{s}" / stage / "summary.json") for s in seeds]
        revised = [_revised(root / f"seed{s}" / stage) for s in seeds]
        lines.append(f"| {label} | {method} | {_mean_std([_em(x) for x in found])} | "
                     + " | ".join(_mean_std([_em(x, h) for x in found]) for h in (1, 2, 3))
                     + f" | {_mean_std(revised)} |")  # fmt: skip
    lines += ["", "Full Search-R2 model at evaluation (τ, N_max):", "",
              "| τ | N_max | EM | revised |", "|---|---|---|---|"]  # fmt: skip
    for stage, (tau, n_max) in {"eval_full": (0.0, 1), **SWEEP}.items():
        found = [_json(root / f"seed{s}" / stage / "summary.json") for s in seeds]
        revised = [_revised(root / f"seed{s}" / stage) for s in seeds]
        lines.append(f"| {tau:g} | {n_max} | {_mean_std([_em(x) for x in found])} | "
                     f"{_mean_std(revised)} |")  # fmt: skip
    lines += ["", "Training diagnostics (mean over steps ≥ 1):", "", *_diagnostics(root, seeds)]
    lines += ["", "Per-step cost at equal G:", "", *_overhead(root, seeds)]
    lines += ["", "| seed | " + " | ".join(STAGES) + " |", "|---|" + "---|" * len(STAGES)]
    for seed in seeds:
        t = _json(root / f"seed{seed}" / "times.json") or {}
        lines.append(f"| {seed} | " + " | ".join(f"{t.get(s, 0) / 60:.1f}" for s in STAGES)
                     + " |")  # fmt: skip
    lines.append("(wall minutes per stage)")
    _plot(root, seeds)
    table = "\n".join(lines)
    (root / "summary.md").write_text(table + "\n")
    return table


def _plot(root: Path, seeds: Sequence[int]) -> None:
    """Held-out EM per arm (mean, bars = ±1 std over seeds) and the full model's τ/N_max sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    names = ["eval_sft", *(f"eval_{a}" for a in ARMS), "eval_full_r1"]
    labels = ["SFT", *(ARMS[n.removeprefix("eval_")][0] for n in names[1:-1]), "full, no refiner"]
    means, stds = [], []
    for name in names:
        found = [_em(_json(root / f"seed{s}" / name / "summary.json")) for s in seeds]
        found = [v for v in found if v is not None]
        means.append(statistics.fmean(found) if found else 0.0)
        stds.append(statistics.pstdev(found) if len(found) > 1 else 0.0)
    left.bar(range(len(names)), means, yerr=stds, color="tab:blue", alpha=0.8)
    left.set_xticks(range(len(names)), labels, rotation=35, ha="right", fontsize=8)
    left.set_ylabel(f"held-out EM ({len(seeds)} seed(s))")
    left.grid(alpha=0.3, axis="y")
    for title, stages, xs in (("τ (N_max 1)", ["eval_full_tau-1", "eval_full", "eval_full_tau1"],
                               [-1, 0, 1]),
                              ("N_max (τ 0)", ["eval_full", "eval_full_n2", "eval_full_n3"],
                               [1, 2, 3])):  # fmt: skip
        ys = []
        for stage in stages:
            found = [_em(_json(root / f"seed{s}" / stage / "summary.json")) for s in seeds]
            found = [v for v in found if v is not None]
            ys.append(statistics.fmean(found) if found else float("nan"))
        right.plot(xs, ys, marker="o", label=title)
    right.set_xlabel("τ or N_max")
    right.set_ylabel("held-out EM, full Search-R2")
    right.grid(alpha=0.3)
    right.legend()
    fig.tight_layout()
    fig.savefig(root / "search_r2.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/search_r2"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=8, help="RL steps per arm")
    parser.add_argument("--batch", type=int, default=8, help="prompts per RL step")
    parser.add_argument("--group", type=int, default=4, help="G, samples per prompt")
    parser.add_argument("--sft-examples", type=int, default=300)
    parser.add_argument("--meta-examples", type=int, default=100)
    parser.add_argument("--test", type=int, default=200, help="held-out questions")
    parser.add_argument("--train", type=int, default=400, help="train questions")
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every RL arm (repeatable)")  # fmt: skip
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for the SFT warm start (repeatable)")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write tables + PNG")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run_all(args.out, args)
    print(summarize(args.out, args.seeds))


if __name__ == "__main__":
    main()
