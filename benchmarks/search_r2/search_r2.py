"""Search-R2 evidence on the synthetic world: the refiner's quality before RL, the paper's
ablation rows at equal steps, the Meta-Refiner's diagnostics, and its per-step overhead.

    python benchmarks/search_r2/search_r2.py --out runs/search_r2 --seeds 0 1 2 --steps 30
    python benchmarks/search_r2/search_r2.py --out runs/search_r2 --seeds 0 1 2 --summarize \
        # tables + PNG

Per seed: a world (test split of `--test` questions) → BM25 index → one warm start
(`searchrl sft --config tiny_cpu_sft`: the Actor's references, then the Meta-Refiner's meta
phase on `--meta-examples` corrupted references and `--meta-rollouts` of the model's own
rollouts labelled by the world's oracle; its `summary.json` holds the refiner's ROC-AUC and
trimmer exact step on held-out own rollouts) → from that same checkpoint, `--steps` RL steps of
every arm, all from the preset `tiny_cpu_search_r2` plus the same `--set` overrides (the
learning recipe), so arms differ only by the refiner:

| arm | what changes |
|---|---|
| `r1_g` | Search-R1: no refiner, EM reward, G samples |
| `r1_2g` | Search-R1 with 2G samples (the paper's "more samples" control) |
| `refiner` | + Meta-Refiner, trained on reasoning traces only, EM reward |
| `process` | + the gated hybrid reward's process term (oracle judge) |
| `full` | full Search-R2: + joint optimization of the refiner's decisions |
| `random_cut` | `refiner` with a uniformly random cut (`refiner.trimmer=random`): S_trim's floor |
| `rule_disc` | `refiner` with the rule discriminator (`refiner.discriminator=rule`) |
| `resample` | `refiner` cutting at step 1 (`refiner.trimmer=first`): reject and resample |
| `fresh` | `refiner` redrawing a regeneration that repeats the cut step (`refiner.fresh_tries=2`) |
| `confidence` | `refiner` deciding on the Actor's surprisal (`refiner.discriminator=confidence`) |
| `conf_resample` | `confidence`, cutting at step 1: reject the unsure and resample |
| `conf_random` | `confidence` with a uniformly random cut: S_trim's floor for `confidence` |
| `checked` | `refiner` cutting where a check of the transcript fails (`refiner.trimmer=checked`) |
| `conf_checked` | `confidence` with the checked trimmer |

The confidence arms take `refiner.confidence_threshold` from the warm start's
`meta/final/confidence/threshold_for_flawed_share` (it revises as many of its held-out
rollouts as the oracle finds flawed).

Each model is evaluated greedily on the held-out split: Search-R1 arms with `--method
search-r1`, refiner arms with `--method search-r2`, whose summary holds both the trained Actor
alone (refiner off: the paper's number) and with test-time refinement (τ = 0, N_max = 1, the
arm's own switches). `--sweep` adds the full model at τ ∈ {−1, 1} and N_max ∈ {2, 3}. Every
stage is a CLI call whose output marks it done, so a killed run resumes where it stopped
(training resumes from its last checkpoint). With `--warm-start RUN` every seed starts
from that one `searchrl sft` run (its world and model; seeds vary RL alone, which is what fits
a 2-core machine; it is evaluated once, in `eval_sft/` beside the seeds), and `--eval-world
WORLD` evaluates every model on another world's test split
(an unseen world, or one with more questions):

    python benchmarks/search_r2/search_r2.py --out runs/r2_shared --warm-start runs/sft2 \
        --eval-world runs/world_eval --seeds 0 1 2 --steps 6 --arms r1_g conf_resample \
        --threshold 0.0236

`--summarize` writes `summary.md` and
`search_r2.png` (benchmarks/search_r2/search_r2_summary.py). `--archive DIR` also keeps what the
summary reads, without models or texts (a few hundred KiB), so a campaign's tables and intervals
outlive the machine it ran on: `--summarize --out DIR --warm-start DIR/warm_start` rebuilds
them (benchmarks/search_r2/search_r2_archive.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # stages.py
from search_r2_archive import archive
from search_r2_summary import summarize
from stages import HOPS, ROLLOUT, run_stage, searchrl

R1 = ("refiner.enabled=false", "refiner.joint=false", "reward.kind=em")
TRACES_ONLY = ("refiner.joint=false", "reward.kind=em")
CONFIDENCE = "refiner.discriminator=confidence"
THRESHOLD_KEY = "meta/final/confidence/threshold_for_flawed_share"
ARMS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # arm: (label, training overrides, refiner switches also used at evaluation)
    "r1_g": ("Search-R1 (G)", R1, ()),
    "r1_2g": ("Search-R1 (2G)", R1, ()),
    "refiner": ("+ Meta-Refiner", TRACES_ONLY, ()),
    "process": ("+ process reward", ("refiner.joint=false",), ()),
    "full": ("full Search-R2 (joint)", (), ()),
    "random_cut": ("random-cut refiner", TRACES_ONLY, ("refiner.trimmer=random",)),
    "rule_disc": ("rule discriminator", TRACES_ONLY, ("refiner.discriminator=rule",)),
    "resample": ("reject and resample", TRACES_ONLY, ("refiner.trimmer=first",)),
    "fresh": ("refiner, fresh regenerations", TRACES_ONLY, ("refiner.fresh_tries=2",)),
    "confidence": ("confidence discriminator", TRACES_ONLY, (CONFIDENCE,)),
    "conf_resample": (
        "confidence, reject and resample",
        TRACES_ONLY,
        (CONFIDENCE, "refiner.trimmer=first"),
    ),
    "conf_random": (
        "confidence, random cut",
        TRACES_ONLY,
        (CONFIDENCE, "refiner.trimmer=random"),
    ),
    "checked": ("checked trimmer", TRACES_ONLY, ("refiner.trimmer=checked",)),
    "conf_checked": (
        "confidence, checked cut",
        TRACES_ONLY,
        (CONFIDENCE, "refiner.trimmer=checked"),
    ),
}
DEFAULT_ARMS = ("r1_g", "r1_2g", "refiner", "process", "full", "random_cut")
SWEEP = {  # full model at evaluation: stage → (τ, N_max); τ = 0, N_max = 1 is `eval_full`
    "eval_full_tau-1": (-1.0, 1),
    "eval_full_tau1": (1.0, 1),
    "eval_full_n2": (0.0, 2),
    "eval_full_n3": (0.0, 3),
}


def stages(arms: Sequence[str], sweep: bool, warm_start: bool = False) -> list[str]:
    """Every stage of a seed, in the order they run (no warm start of its own under
    `--warm-start`, and its "world" is then the evaluation index alone)."""
    first = ["world"] if warm_start else ["world", "sft"]
    out = [*first, "eval_sft", *arms, *(f"eval_{a}" for a in arms)]
    return out + list(SWEEP) if sweep and "full" in arms else out


def eval_sft_dir(root: Path, warm_start: Path | None, seed: int) -> Path:
    """Where the warm start's evaluation is: once for all seeds when they share it (the same
    model read greedily on the same questions), else in each seed's folder."""
    return root / "eval_sft" if warm_start else root / f"seed{seed}" / "eval_sft"


class Seed:
    """The stages of one seed, each skipped when its output exists."""

    def __init__(self, root: Path, seed: int, args: argparse.Namespace):
        self.dir = root / f"seed{seed}"
        self.seed = seed
        self.args = args
        self.dir.mkdir(parents=True, exist_ok=True)
        self.times_path = self.dir / "times.json"
        shared = args.warm_start
        self.sft_dir = shared or self.dir / "sft"
        self.world_dir = shared / "world" if shared else self.dir / "world"
        self.eval_world = args.eval_world or self.world_dir
        """The world whose test split every model is evaluated on (indexed in `world_bm25`)."""

    def _world(self) -> list[list[str]]:
        world, index = self.dir / "world", self.dir / "world_bm25"
        corpus = str(self.eval_world / "corpus.jsonl")
        build = searchrl("index", "--kind", "bm25", "--corpus", corpus, "--out", str(index))
        if self.args.warm_start:
            return [build]
        size = [f"hop_weights={HOPS}", f"test_questions={self.args.test}",
                f"train_questions={self.args.train}",
                f"num_entities={self.args.entities}"]  # fmt: skip
        return [searchrl("world", "--seed", str(self.seed), "--out", str(world), *size), build]

    def _sft(self) -> list[list[str]]:
        options = [f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}",
                   f"max_examples={self.args.sft_examples}",
                   f"meta_examples={self.args.meta_examples}",
                   f"meta_rollouts={self.args.meta_rollouts}",
                   f"meta_eval_size={self.args.meta_eval}"]  # fmt: skip
        out = ["--out", str(self.dir / "sft"), "--force"]
        return [searchrl("sft", "--config", "tiny_cpu_sft", *out, *options, *self.args.sft_set)]

    def _train(self, arm: str) -> list[list[str]]:
        group = 2 * self.args.group if arm == "r1_2g" else self.args.group
        start = [f"policy.init_checkpoint={self.sft_dir / 'model'}",
                 f"data.world_dir={self.world_dir}", f"seed={self.seed}"]  # fmt: skip
        run = [f"steps={self.args.steps}", f"batch_size={self.args.batch}",
               f"mini_batch_size={self.args.batch}", f"n_samples={group}", "data.eval_size=0",
               "logging.progress=false", "logging.tensorboard=false"]  # fmt: skip
        overrides, switches = ARMS[arm][1], self._switches(arm)
        out = ["--out", str(self.dir / arm), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_search_r2", *out, *start, *run,
                         *overrides, *switches, *self.args.set)]  # fmt: skip

    def _switches(self, arm: str) -> tuple[str, ...]:
        """The arm's refiner switches, with the warm start's calibrated surprisal threshold
        for a confidence arm (`--threshold` where its summary holds none; none before the warm
        start has run)."""
        switches = ARMS[arm][2]
        summary = self.sft_dir / "summary.json"
        if CONFIDENCE not in switches or not summary.is_file():
            return switches
        threshold = json.loads(summary.read_text()).get(THRESHOLD_KEY) or self.args.threshold
        if not threshold > 0:
            return switches
        return (*switches, f"refiner.confidence_threshold={threshold:.6g}")

    def _eval(self, model: Path, out: Path, method: str, refiner: Sequence[str]) -> list[list[str]]:
        sets = [f"--set={o}" for o in (*ROLLOUT, *refiner)]
        data, index = self.eval_world / "test.jsonl", self.dir / "world_bm25"
        return [searchrl("eval", "--method", method, "--model", str(model), "--data", str(data),
                         "--index", str(index), "--out", str(out), *sets)]  # fmt: skip

    def commands(self, stage: str) -> tuple[Path, list[list[str]]]:
        """(marker whose existence means done, the commands of the stage)."""
        d = self.dir
        if stage == "world":
            return d / "world_bm25" / "manifest.json", self._world()
        if stage == "sft":
            return self.sft_dir / "summary.json", self._sft()
        if stage in ARMS:
            return d / stage / "model" / "config.json", self._train(stage)
        if stage == "eval_sft":
            out = eval_sft_dir(d.parent, self.args.warm_start, self.seed)
            return out / "summary.json", self._eval(self.sft_dir / "model", out, "search-r1", ())
        marker = d / stage / "summary.json"
        if stage in SWEEP:
            tau, n_max = SWEEP[stage]
            knobs = (f"refiner.margin={tau}", f"refiner.max_revisions={n_max}")
            return marker, self._eval(d / "full" / "model", d / stage, "search-r2", knobs)
        arm = stage.removeprefix("eval_")
        method = "search-r1" if arm.startswith("r1_") else "search-r2"
        return marker, self._eval(d / arm / "model", d / stage, method, self._switches(arm))

    def run(self, stage: str, threads: int) -> None:
        marker, commands = self.commands(stage)
        if marker.exists():
            return
        log = self.dir / f"{stage}.log"
        run_stage(self.times_path, stage, commands, log, threads)


def run_all(root: Path, args: argparse.Namespace) -> None:
    """Every stage of every seed, one after another, with one progress bar and an ETA."""
    seeds = [Seed(root, s, args) for s in args.seeds]
    names = stages(args.arms, args.sweep, args.warm_start is not None)
    todo = [(s, st) for s in seeds for st in names if not s.commands(st)[0].exists()]
    columns = (TextColumn("search-r2"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.description}"))  # fmt: skip
    with Progress(*columns) as progress:
        task = progress.add_task("", total=len(todo))
        for seed, stage in todo:
            progress.update(task, description=f"seed {seed.seed}: {stage}")
            seed.run(stage, args.threads)
            progress.advance(task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/search_r2"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=list(ARMS))
    parser.add_argument("--steps", type=int, default=30, help="RL steps per arm")
    parser.add_argument("--batch", type=int, default=8, help="prompts per RL step")
    parser.add_argument("--group", type=int, default=4, help="G, samples per prompt")
    parser.add_argument("--sft-examples", type=int, default=300)
    parser.add_argument("--meta-examples", type=int, default=400,
                        help="corrupted/clean references in the meta phase")  # fmt: skip
    parser.add_argument("--meta-rollouts", type=int, default=400,
                        help="own rollouts of train questions (oracle-labelled)")  # fmt: skip
    parser.add_argument("--meta-eval", type=int, default=120,
                        help="held-out own rollouts to measure the refiner on")  # fmt: skip
    parser.add_argument("--test", type=int, default=200, help="held-out questions")
    parser.add_argument("--train", type=int, default=400, help="train questions")
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--sweep", action="store_true", help="τ and N_max sweep of `full`")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every RL arm (repeatable)")  # fmt: skip
    parser.add_argument("--sft-set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for the warm start (repeatable)")  # fmt: skip
    parser.add_argument(
        "--warm-start",
        type=Path,
        default=None,
        help="a `searchrl sft` run (model/, world/, summary.json) every seed "
        "starts from: seeds then vary RL alone, no world or warm start each",
    )
    parser.add_argument(
        "--eval-world",
        type=Path,
        default=None,
        help="a `searchrl world` folder whose test split every model is "
        "evaluated on, instead of the world it trained on (a bigger test "
        "split, or questions of an unseen world)",
    )
    parser.add_argument("--threshold", type=float, default=0.0,
                        help="refiner.confidence_threshold of the confidence arms where the "
                        "warm start's summary holds none")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write tables + PNG")
    parser.add_argument("--archive", type=Path, default=None, metavar="DIR",
                        help="also copy what the summary reads (per-question scores, per-step "
                        "metrics, times; no models or texts) into DIR, small enough to commit "
                        "(benchmarks/search_r2/search_r2_archive.py)")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run_all(args.out, args)
    print(summarize(args.out, args.seeds, args.arms, args.warm_start))
    if args.archive is not None:
        kept = archive(args.out, args.archive, args.seeds, args.arms, args.warm_start)
        size = sum(p.stat().st_size for p in kept)
        print(f"archived {len(kept)} files ({size / 1024:.0f} KiB) in {args.archive}")


if __name__ == "__main__":
    main()
