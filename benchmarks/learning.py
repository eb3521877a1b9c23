"""Learning evidence over several seeds: SFT warm start → GRPO with and without retrieved-token
masking → held-out EM per hop count, and the masked policy on a world it never saw.

    python benchmarks/learning.py --out runs/learning --seeds 0 1 2
    python benchmarks/learning.py --out runs/learning --seeds 0 1 2 --summarize   # table + PNG

Per seed: a 1-3-hop world (test split of `--test` questions) → BM25 index → `searchrl sft`
(preset `tiny_cpu_sft`) → `searchrl eval` of the warm start → `searchrl train` (preset
`tiny_cpu_grpo`) once with env tokens masked and once without (the paper's ablation), both
from that warm start → `searchrl eval` of each → the masked policy on the test split of a
world generated with seed `1000 + seed`. Every stage is a CLI call whose output folder marks
it done, so a killed benchmark resumes where it stopped (training stages resume from their
last checkpoint). SFT and GRPO wall times are recorded per seed: the issue's budget is 45
CPU-minutes of training per seed. Seeds run one after another unless `--parallel 2`
(one process per core, one torch thread each).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from searchrl.eval.stats import PairedResult, paired_test
from stages import HOPS, ROLLOUT, call, searchrl

ARMS = {"masked": "algo.mask_env=true", "unmasked": "algo.mask_env=false"}
STAGES = ("world", "sft", "eval_sft", "masked", "eval_masked", "unmasked", "eval_unmasked",
          "cross_world", "eval_cross")  # fmt: skip


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

    def _world(self, name: str, world_seed: int) -> list[list[str]]:
        world, index = self.dir / name, self.dir / f"{name}_bm25"
        size = [f"hop_weights={HOPS}", f"test_questions={self.args.test}",
                f"train_questions={self.args.train}",
                f"num_entities={self.args.entities}"]  # fmt: skip
        corpus = str(world / "corpus.jsonl")
        return [
            searchrl("world", "--seed", str(world_seed), "--out", str(world), *size),
            searchrl("index", "--kind", "bm25", "--corpus", corpus, "--out", str(index)),
        ]

    def _eval(self, model: Path, world: str, name: str) -> list[list[str]]:
        data = self.dir / world / "test.jsonl"
        index = self.dir / f"{world}_bm25"
        sets = [f"--set={o}" for o in ROLLOUT]
        method = ["--method", "search-r1", "--model", str(model)]
        return [searchrl("eval", *method, "--data", str(data), "--index", str(index),
                         "--out", str(self.dir / name), *sets)]  # fmt: skip

    def _train(self, arm: str) -> list[list[str]]:
        start = [f"policy.init_checkpoint={self.dir / 'sft' / 'model'}",
                 f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}"]  # fmt: skip
        run = [f"steps={self.args.steps}", "data.eval_size=0", "logging.progress=false"]
        out = ["--out", str(self.dir / arm), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_grpo", *out, *start, *run,
                         ARMS[arm], *self.args.set)]  # fmt: skip

    def _sft(self) -> list[list[str]]:
        options = [f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}",
                   f"max_examples={self.args.sft_examples}"]  # fmt: skip
        out = ["--out", str(self.dir / "sft"), "--force"]
        return [searchrl("sft", "--config", "tiny_cpu_sft", *out, *options)]

    def commands(self, stage: str) -> tuple[Path, list[list[str]]]:
        """(marker whose existence means done, the commands of the stage)."""
        d = self.dir
        if stage in ("world", "cross_world"):
            name = "world" if stage == "world" else "cross"
            seed = self.seed if stage == "world" else 1000 + self.seed
            return d / f"{name}_bm25" / "manifest.json", self._world(name, seed)
        if stage == "sft":
            return d / "sft" / "model" / "config.json", self._sft()
        if stage in ARMS:
            return d / stage / "model" / "config.json", self._train(stage)
        model = {"eval_sft": "sft", "eval_masked": "masked", "eval_unmasked": "unmasked",
                 "eval_cross": "masked"}[stage]  # fmt: skip
        world = "cross" if stage == "eval_cross" else "world"
        return d / stage / "summary.json", self._eval(d / model / "model", world, stage)

    def run(self, stage: str, threads: int) -> None:
        marker, commands = self.commands(stage)
        if marker.exists():
            return
        seconds = sum(call(cmd, self.dir / f"{stage}.log", threads) for cmd in commands)
        self.times[stage] = self.times.get(stage, 0.0) + seconds
        self.times_path.write_text(json.dumps(self.times, indent=2) + "\n")


def run_all(root: Path, args: argparse.Namespace) -> None:
    """Every stage of every seed, with one progress bar and an ETA over all of them."""
    seeds = [Seed(root, s, args) for s in args.seeds]
    todo = [(s, st) for s in seeds for st in STAGES if not s.commands(st)[0].exists()]
    columns = (TextColumn("learning"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.description}"))  # fmt: skip
    with Progress(*columns) as progress:
        task = progress.add_task("", total=len(todo))

        def work(seed: Seed) -> None:
            for stage in STAGES:
                if seed.commands(stage)[0].exists():
                    continue
                progress.update(task, description=f"seed {seed.seed}: {stage}")
                seed.run(stage, args.threads)
                progress.advance(task)

        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(work, seeds))


def _summary(path: Path) -> dict | None:  # type: ignore[type-arg]
    return json.loads(path.read_text()) if path.is_file() else None


def _em(summary: dict | None, key: str | None = None) -> float | None:  # type: ignore[type-arg]
    """Overall EM (or EM of one hop stratum) of a `searchrl eval` summary."""
    if summary is None:
        return None
    overall = summary["overall"]
    if key is None:
        return overall["em"]["mean"]
    stratum = summary.get("by_hops", {}).get(key)
    return None if stratum is None else stratum["em"]["mean"]


def _format_valid(folder: Path) -> float | None:
    """Share of an evaluation's trajectories in valid Search-R1 format (think → search/answer
    turns, ending with one answer), read from its per-sample file."""
    from searchrl.reward.format import is_valid_sequence

    path = folder / "samples.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    valid = [
        is_valid_sequence("".join(s["text"] for s in r["trajectory"]["segments"])) for r in rows
    ]
    return sum(valid) / max(len(valid), 1)


def _paired_gain(folder: Path, arm: str, seed: int) -> PairedResult | None:
    """The arm's per-question EM minus the SFT start's on the same questions, with its 95%
    paired bootstrap interval (None until both evaluations exist)."""

    def per_question(name: str) -> dict[str, float] | None:
        path = folder / name / "samples.jsonl"
        if not path.is_file():
            return None
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return {r["id"]: float(r["em"]) for r in rows}

    after, before = per_question(arm), per_question("eval_sft")
    if after is None or before is None:
        return None
    ids = sorted(after.keys() & before.keys())
    return paired_test([after[i] for i in ids], [before[i] for i in ids], 4000, 0.95, seed)


def _mean_std(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "–"
    if len(found) == 1:
        return f"{found[0]:.3f}"
    return f"{statistics.fmean(found):.3f} ± {statistics.stdev(found):.3f}"


def summarize(root: Path, seeds: Sequence[int]) -> str:
    """Markdown tables (per seed and mean ± std over seeds) and `learning.png`."""
    rows = []
    columns = [("SFT", "eval_sft"), ("GRPO masked", "eval_masked"),
               ("GRPO unmasked", "eval_unmasked"),
               ("masked, unseen world", "eval_cross")]  # fmt: skip
    lines = ["| seed | model | EM | 1-hop | 2-hop | 3-hop | searches 1/2/3-hop | valid format |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        d = root / f"seed{seed}"
        for label, name in columns:
            s = _summary(d / name / "summary.json")
            rows.append((seed, label, s))
            if s is None:
                continue
            hops = [_em(s, str(h)) for h in (1, 2, 3)]
            searches = [s.get("by_hops", {}).get(str(h), {}).get("searches", {}).get("mean")
                        for h in (1, 2, 3)]  # fmt: skip
            lines.append(
                f"| {seed} | {label} | {_em(s):.3f} | "
                + " | ".join("–" if h is None else f"{h:.3f}" for h in hops)
                + " | "
                + "/".join("–" if x is None else f"{x:.2f}" for x in searches)
                + f" | {_format_valid(d / name) or 0.0:.3f} |"
            )
    lines += [
        "",
        "| model | EM (mean ± std over seeds) | 1-hop | 2-hop | 3-hop |",
        "|---|---|---|---|---|",
    ]
    for label, _ in columns:
        picked = [s for _, lab, s in rows if lab == label]
        lines.append(f"| {label} | {_mean_std([_em(s) for s in picked])} | "
                     + " | ".join(_mean_std([_em(s, str(h)) for s in picked]) for h in (1, 2, 3))
                     + " |")  # fmt: skip
    lines += ["", "| seed, arm | EM − SFT's (95% paired bootstrap) | wins / losses | sign-test p |",
              "|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        for arm in ARMS:
            gain = _paired_gain(root / f"seed{seed}", f"eval_{arm}", seed)
            if gain is not None:
                lines.append(
                    f"| {seed} {arm} | {gain.diff:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] | "
                    f"{gain.wins} / {gain.losses} | {gain.p_value:.2g} |"
                )
    lines += ["", "| seed | SFT min | GRPO masked min | SFT + GRPO min |", "|---|---|---|---|"]
    for seed in seeds:
        times_path = root / f"seed{seed}" / "times.json"
        t = json.loads(times_path.read_text()) if times_path.is_file() else {}
        sft_m, rl_m = t.get("sft", 0) / 60, t.get("masked", 0) / 60
        lines.append(f"| {seed} | {sft_m:.1f} | {rl_m:.1f} | {sft_m + rl_m:.1f} |")
    _plot(root, seeds)
    table = "\n".join(lines)
    (root / "summary.md").write_text(table + "\n")
    return table


def _plot(root: Path, seeds: Sequence[int]) -> None:
    """Train reward, searches and format validity per GRPO step: mean over seeds, band = ±1 std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("critic/score/mean", "train reward (EM)"),
              ("env/number_of_valid_search", "searches / trajectory"),
              ("reward/format_valid", "valid format"))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for arm in ARMS:
        runs = []
        for seed in seeds:
            path = root / f"seed{seed}" / arm / "metrics.jsonl"
            if path.is_file():
                runs.append([json.loads(x) for x in path.read_text().splitlines() if x.strip()])
        for ax, (key, title) in zip(axes, panels, strict=True):
            ax.set_title(title)
            ax.set_xlabel("GRPO step")
            ax.grid(alpha=0.3)
            series = [[r[key] for r in run if r["step"] > 0 and key in r] for run in runs]
            length = min((len(s) for s in series), default=0)
            if length == 0:
                continue
            per_step = [[s[i] for s in series] for i in range(length)]
            mean = [statistics.fmean(v) for v in per_step]
            std = [statistics.pstdev(v) for v in per_step]
            xs = list(range(1, length + 1))
            ax.plot(xs, mean, lw=2, label=f"{arm} ({len(series)} seeds)")
            ax.fill_between(xs, [m - s for m, s in zip(mean, std, strict=True)],
                            [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2)  # fmt: skip
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(root / "learning.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps per arm")
    parser.add_argument("--sft-examples", type=int, default=300)
    parser.add_argument("--test", type=int, default=200, help="held-out questions per world")
    parser.add_argument("--train", type=int, default=400, help="train questions per world")
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--parallel", type=int, default=1, help="seeds run side by side")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for both GRPO arms (repeatable)")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write tables + PNG")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run_all(args.out, args)
    print(summarize(args.out, args.seeds))


if __name__ == "__main__":
    main()
