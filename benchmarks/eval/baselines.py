"""The papers' Table 2 on our data: every method of both papers (Direct, CoT, RAG, IRCoT,
Search-o1, SFT, R1, rejection sampling, Search-R1, Search-R2) plus Direct and RAG fine-tuned
with the search policy's warm-start budget, on a synthetic world's test split and on the seven
shared QA sets, with a BM25 and a dense (embedded all-MiniLM) column, greedy, 95% intervals.

    nice -n 19 env OMP_NUM_THREADS=1 SEARCHRL_THREADS=1 python benchmarks/eval/baselines.py \\
        --out runs/baselines --world runs/exp/s0/world \\
        --sft runs/exp/s0/sft/model --search-r1 runs/exp/s0/grpo/model \\
        --r1 runs/r1/model --rejection runs/rejection/model --search-r2 runs/r2/model
    python benchmarks/eval/baselines.py --out runs/baselines --table-only   # the grid of what ran

Resumable: every (data, retriever, method) cell is a `searchrl eval` folder under
`OUT/evals/`; a killed run continues inside the cell where it stopped, and a rerun with new
checkpoints only evaluates the new cells. Prompted methods run the embedded instruct model;
`direct-ft` and `rag-ft` are fine-tuned here (`searchrl sft source=direct|rag` on the world's
references, the `--ft-config` budget) unless given; the other trained methods run only when
their checkpoint is given. Prints one progress line per batch (cell, questions, ETA over all
cells) and writes `OUT/table.md`; `searchrl report OUT/evals` shows the same grid.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from searchrl.config.data import world_preset
from searchrl.config.eval import EvalConfig
from searchrl.config.loading import load_config
from searchrl.data.world import generate_world, write_world
from searchrl.eval.harness import Resources, evaluate, retriever_identity
from searchrl.eval.registry import METHODS
from searchrl.eval.sets import load_sets
from searchrl.eval.store import BusyError
from searchrl.models.loading import load_policy
from searchrl.report.grid import grid_markdown, load_summaries, world_hops_markdown
from searchrl.retrieval import build_index, load_index

SHARED = Path(
    os.environ.get("SEARCHRL_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")
)
"""`../shared/data` next to the checkout (or $SEARCHRL_SHARED_DATA, as the tests read it)."""
PROMPTED = ("direct", "cot", "rag", "ircot", "search-o1")
FINE_TUNED = ("direct-ft", "rag-ft")
TRAINED = ("sft", "r1", "rejection", "search-r1", "search-r2")
ORDER = ("direct", "cot", "direct-ft", "r1", "rag", "rag-ft", "sft", "rejection", "search-r1",
         "search-r2", "ircot", "search-o1")  # fmt: skip
"""Cells of one data set and retriever run in this order: cheapest first."""
BUDGET = ("rollout.max_response_tokens=200", "rollout.max_obs_tokens=300",
          "rollout.max_total_tokens=3072")  # fmt: skip
"""Shared by every method: the trained policies' per-turn and passage caps
(benchmarks/common/stages.py), a larger total so IRCoT's few-shot prompt and four retrievals fit."""


@dataclass(frozen=True)
class Cell:
    """One evaluation: which data, which retriever, which method."""

    data: str
    retriever: str
    method: str

    @property
    def name(self) -> str:
        return f"{self.data}-{self.retriever}-{self.method}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--world", type=Path, help="World folder (default: OUT/world, generated).")
    parser.add_argument("--qa", type=Path, default=SHARED / "qa")
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpus" / "wiki_paragraphs.jsonl")
    parser.add_argument("--limit", type=int, default=100, help="Questions per QA set.")
    parser.add_argument("--world-limit", type=int, default=100, help="World test questions.")
    parser.add_argument("--retrievers", default="bm25,dense")
    parser.add_argument("--data", default="world,wiki", help="world and/or wiki (the QA sets).")
    parser.add_argument("--methods", default=",".join(PROMPTED + FINE_TUNED + TRAINED))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--set", action="append", default=[], help="EvalConfig override.")
    parser.add_argument(
        "--trained-set", action="append", default=[],
        help="Override for the trained methods only (sft, r1, rejection, search-r1, search-r2): "
        "the settings their recipe evaluates with, e.g. rollout.max_turns=5.",
    )  # fmt: skip
    parser.add_argument("--ft-config", default="tiny_cpu_sft", help="SFT preset of direct/rag-ft.")
    parser.add_argument("--ft-set", action="append", default=[], help="Its overrides (k=v).")
    parser.add_argument("--table-only", action="store_true")
    for name in FINE_TUNED + TRAINED:
        parser.add_argument(f"--{name}", type=Path, help=f"{name} checkpoint directory.")
    return parser.parse_args()


def world_dir(args: argparse.Namespace) -> Path:
    """The given world, or the `demo` preset (seed 0) generated once into OUT/world."""
    if args.world is not None:
        return args.world
    target = args.out / "world"
    if not (target / "manifest.json").is_file():
        write_world(generate_world(world_preset("demo")), target)
    return target


def index_dir(args: argparse.Namespace, world: Path, name: str) -> Path:
    """The index `name` (`world-bm25`, `wiki-dense`, …), built under OUT/index when first
    needed."""
    data, kind = name.split("-", 1)
    corpus = world / "corpus.jsonl" if data == "world" else args.corpus
    folder = args.out / "index" / name
    if not (folder / "manifest.json").is_file():
        print(f"building the {kind} index of {corpus} into {folder}", flush=True)
        build_index(kind, corpus, folder, force=True)  # type: ignore[arg-type]
    return folder


def _checkpoint(args: argparse.Namespace, method: str) -> Path | None:
    return getattr(args, method.replace("-", "_"), None)


def fine_tune(args: argparse.Namespace, method: str, world: Path) -> Path:
    """`direct-ft` / `rag-ft`: the given checkpoint, or `searchrl sft source=direct|rag` on the
    world's references into OUT/ft/<method> (skipped when its model exists)."""
    given = _checkpoint(args, method)
    if given is not None:
        return given
    out = args.out / "ft" / method
    if (out / "model" / "config.json").is_file():
        return out / "model"
    source = method.removesuffix("-ft")
    cmd = [sys.executable, "-m", "searchrl", "sft", "--config", args.ft_config, "--out",
           str(out), "--force", f"source={source}", f"data.world_dir={world.resolve()}",
           *args.ft_set]  # fmt: skip
    log = args.out / "ft" / f"{method}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"fine-tuning {method}: {' '.join(cmd[2:])} (log {log})", flush=True)
    with log.open("ab") as handle:
        if subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT).returncode != 0:
            raise SystemExit(f"fine-tuning {method} failed, see {log}")
    return out / "model"


def cells(args: argparse.Namespace) -> list[Cell]:
    """Every cell to evaluate (trained methods only with a checkpoint): the world first, then
    the QA sets; no retrieval, then BM25, then dense; within those, cheap methods first
    (`ORDER`), so the world's comparison of Direct, RAG and their fine-tuned versions is there
    long before the expensive multi-step baselines on 700 questions."""
    wanted = args.methods.split(",")
    unknown = [m for m in wanted if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s): {', '.join(unknown)}")
    usable = [m for m in ORDER if m in wanted and (m not in TRAINED or _checkpoint(args, m))]
    out = []
    for data in args.data.split(","):
        for retriever in ["none", *args.retrievers.split(",")]:
            for name in usable:
                if METHODS[name].retrieval == (retriever != "none"):
                    out.append(Cell(data, retriever, name))
    return out


class OnePolicy:
    """The loaded policy of the current cell's model, one at a time: the next model's load
    closes the previous engine first. A vLLM engine holds a worker process and its whole KV
    cache (`model.vllm_kv_cache_gib`) until closed, so keeping every model a grid uses loaded
    (the embedded instruct model and each checkpoint) multiplied that memory on a 24 GiB
    machine. Cells of one model are mostly adjacent (`ORDER`), so a switch back costs one
    reload."""

    def __init__(self, load: Callable[[str], Any]):
        self.load = load
        self.model: str | None = None
        self.policy: Any = None

    def __call__(self, model: str) -> Any:
        if model != self.model:
            self.close()
            self.policy, self.model = self.load(model), model
        return self.policy

    def close(self) -> None:
        """Stop the engine (vLLM; an HF or CTranslate2 model is freed with its last
        reference)."""
        close = getattr(getattr(self.policy, "backend", None), "close", None)
        if callable(close):
            close()
        self.policy, self.model = None, None


class Tracker:
    """One log line per batch: the cell, its questions, and all cells' questions with an ETA
    from this session's rate (methods differ in cost, so it is rough early on)."""

    def __init__(self, total: int, done: int):
        self.total, self.done, self.fresh = total, done, 0
        self.start = time.monotonic()
        self.cell, self.cell_done, self.cell_total = "", 0, 0

    def begin(self, cell: str, done: int, total: int) -> None:
        self.cell, self.cell_done, self.cell_total = cell, done, total

    def __call__(self, n: int) -> None:
        self.done += n
        self.fresh += n
        self.cell_done += n
        elapsed = time.monotonic() - self.start
        left = (self.total - self.done) * elapsed / max(self.fresh, 1)
        print(
            f"[{time.strftime('%H:%M:%S')}] {self.cell} {self.cell_done}/{self.cell_total} | "
            f"all {self.done}/{self.total} ({100 * self.done / max(self.total, 1):.1f}%) | "
            f"elapsed {_clock(elapsed)} ETA {_clock(left)}",
            flush=True,
        )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _rows_in(folder: Path) -> int:
    path = folder / "samples.jsonl"
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def run_cells(args: argparse.Namespace, todo: list[Cell]) -> None:
    """Evaluate every cell into OUT/evals/<cell>; models, indexes and fine-tuned baselines are
    loaded or built when a cell first needs them, so a finished grid loads nothing."""
    base = load_config(EvalConfig, None, [*BUDGET, *args.set])
    trained = load_config(EvalConfig, None, [*BUDGET, *args.set, *args.trained_set])
    world = world_dir(args)
    sources = {
        "world": ([str(world / "test.jsonl")], args.world_limit),
        "wiki": ([str(args.qa)], args.limit),
    }
    questions = {data: load_sets(*sources[data]) for data in {c.data for c in todo}}
    sizes = {c: len(questions[c.data]) for c in todo}
    done = {c: min(_rows_in(args.out / "evals" / c.name), sizes[c]) for c in todo}
    tracker = Tracker(sum(sizes.values()), sum(done.values()))

    @functools.cache
    def model_of(method: str) -> str:
        if method in FINE_TUNED:
            return str(fine_tune(args, method, world))
        return str(_checkpoint(args, method)) if method in TRAINED else "embedded"

    policy = OnePolicy(
        lambda model: load_policy(
            replace(base.model, name_or_path=model), max_model_len=base.rollout.max_total_tokens
        )
    )

    @functools.cache
    def retriever(name: str):
        return load_index(index_dir(args, world, name))

    for number, cell in enumerate(todo, start=1):
        folder = args.out / "evals" / cell.name
        if done[cell] >= sizes[cell] and (folder / "summary.json").is_file():
            continue  # finished: nothing to load
        model = model_of(cell.method)
        config = replace(
            trained if cell.method in TRAINED else base, method=cell.method,
            batch_size=args.batch_size, progress=False,
            model=replace(base.model, name_or_path=model),
        )  # fmt: skip
        index = f"{cell.data}-{cell.retriever}" if cell.retriever != "none" else None
        resources = Resources(
            open_retriever=lambda index=index: retriever(index),
            load_policy=lambda model=model: policy(model),
            retriever=retriever_identity(index_dir(args, world, index), None) if index else None,
        )
        tracker.begin(f"cell {number}/{len(todo)} {cell.name}", done[cell], sizes[cell])
        started = time.perf_counter()
        try:
            summary = evaluate(config, questions[cell.data], folder, resources, on_batch=tracker)
        except BusyError:  # another invocation sharing OUT is writing this cell: leave it
            print(f"{cell.name}: skipped, another process is evaluating it", flush=True)
            continue
        em = summary["overall"]["em"]
        print(f"{cell.name}: EM {em['mean']:.3f} [{em['low']:.3f}, {em['high']:.3f}], "
              f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
    policy.close()


def main() -> None:
    args = parse_args()
    os.environ.setdefault("SEARCHRL_THREADS", "1")
    if not args.table_only:
        args.out.mkdir(parents=True, exist_ok=True)
        run_cells(args, cells(args))
    summaries = load_summaries(args.out / "evals")
    hops = world_hops_markdown(summaries)
    text = grid_markdown(summaries) + "\nThe world by hop count:\n\n" + hops
    (args.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
