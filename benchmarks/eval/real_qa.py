"""The papers' Table 2 on the seven real QA sets, trained on real questions: NQ + HotpotQA dev
rows 1000 on (the `wiki_cpu_*` presets), searched in the shared 35k-passage Wikipedia corpus,
evaluated on the first `--limit` rows of each of the seven sets (never trained on:
tests/unit/config/test_presets_wiki.py), greedy, 95% intervals.

    python benchmarks/eval/real_qa.py --out runs/real_qa                  # every stage, resumable
    python benchmarks/eval/real_qa.py --out runs/real_qa --stages train:sft,eval:sft
    python benchmarks/eval/real_qa.py --out runs/real_qa --table-only --archive docs/real_qa

Stages, in order (`--stages` picks some; each is skipped when its output is complete, and a
killed training or evaluation continues where it stopped):

    index:bm25, index:dense      `searchrl index` over the corpus
    recall                       answer recall of the question's top-k passages (the ceiling of
                                 reading them), whole and as the policy is shown them
    train:sft                    the warm start: grounded references (`wiki_cpu_sft`)
    train:direct-ft, train:rag-ft   the same references as (question → answer) and (question +
                                 top-k passages → answer): the fine-tuned baselines
    train:search-r1, train:unmasked, train:r1   GRPO from the warm start (`wiki_cpu_grpo`):
                                 masked, unmasked (`algo.mask_env=false`), without search
    train:rejection              5 samples with search per question, the correct ones kept,
                                 fine-tuned from the warm start (`--rejection-questions`)
    eval:<cell>                  `searchrl eval` of one method (CELLS) on the seven sets
                                 (`shipped`: the package's `embedded-warm`, as users load it;
                                 `before`: the model given as --before, e.g. the warm start
                                 that the shipped one replaces)
    check:<cell>                 the same on CHECK_ROWS (neither trained on nor reported)
    compare                      `searchrl eval compare` for each pair of PAIRS
    table                        OUT/table.md: the grid, the recall ceiling, comparisons, times

Every stage runs as its own `searchrl` process whose progress bar is shown and kept in
OUT/logs/<stage>.log; its wall and CPU time go to OUT/times.json. `--archive DIR` copies what
the table reads (per-question scores, summaries, metrics, times, recall, comparisons and a
manifest of the machine and commit) into DIR, small enough to commit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_qa_report import archive, grid, recall_table, table_markdown

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("SEARCHRL_SHARED_DATA", REPO.parent / "shared" / "data"))
SEARCHRL = [sys.executable, "-m", "searchrl"]
BUDGET = ("rollout.max_response_tokens=200", "rollout.max_obs_tokens=500",
          "rollout.max_total_tokens=3072")  # fmt: skip
"""Every method's evaluation budgets: the world grid's (docs/baselines.md), with the
observation budget the presets use since issue 64 (top-3 passages nearly whole,
`benchmarks/eval/obs_budget.py`)."""
CHECK_ROWS = ("nq.jsonl[100:300]", "popqa.jsonl[100:200]", "hotpotqa.jsonl[100:200]",
              "2wikimultihopqa.jsonl[100:200]")  # fmt: skip
"""The outside check (`check:<cell>`): rows neither trained on (training starts at row 1000)
nor reported (Table 2 is rows 0-99), on which the goals must hold too."""
TRAINED_EVAL = ("rollout.max_turns=5", "rollout.force_answer=true")
"""The trained search policies evaluate as their recipe rolls out (`tiny_cpu_grpo`)."""


@dataclass(frozen=True)
class Cell:
    """One evaluation: a label, the eval method, the model (a trained stage or the embedded
    instruct model) and whether it searches the index."""

    name: str
    method: str
    model: str
    retrieval: bool


CELLS = (
    Cell("direct", "direct", "embedded", False),
    Cell("rag", "rag", "embedded", True),
    Cell("direct-ft", "direct-ft", "train:direct-ft", False),
    Cell("rag-ft", "rag-ft", "train:rag-ft", True),
    Cell("sft", "sft", "train:sft", True),
    Cell("r1", "r1", "train:r1", False),
    Cell("rejection", "rejection", "train:rejection", True),
    Cell("search-r1", "search-r1", "train:search-r1", True),
    Cell("search-r1-unmasked", "search-r1", "train:unmasked", True),
    Cell("shipped", "sft", "embedded-warm", True),
    Cell("before", "sft", "before", True),
)
PAIRS = (
    ("search-r1", "rag-ft"), ("search-r1", "sft"), ("search-r1", "search-r1-unmasked"),
    ("search-r1", "rag"), ("rag", "direct"), ("rag-ft", "direct-ft"), ("sft", "rag-ft"),
    ("search-r1", "rejection"), ("search-r1", "r1"), ("sft", "direct-ft"),
    ("rejection", "sft"), ("shipped", "before"), ("sft", "shipped"),
)  # fmt: skip
"""The issue's three comparisons first, then the rest of the papers' ordering and what
rejection sampling adds to its warm start; last, the shipped warm start against the one it
replaced and against its own full model (what the adapter loses)."""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--qa", type=Path, default=SHARED / "qa")
    p.add_argument("--corpus", type=Path, default=SHARED / "corpus" / "wiki_paragraphs.jsonl")
    p.add_argument("--limit", type=int, default=100, help="Evaluation rows per set (≤ 500).")
    p.add_argument("--retriever", default="dense", help="bm25 or dense: the grid's engine.")
    p.add_argument(
        "--before",
        type=Path,
        help="A warm start evaluated as cell `before` (the "
        "one this campaign replaces: its failure table is the 'before').",
    )
    p.add_argument("--index", type=Path, help="An index of the corpus already built (its "
                   "engine is --retriever's): used instead of OUT/index/<engine>.")  # fmt: skip
    p.add_argument("--stages", default="", help="Comma list (default: all, in order).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=20, help="GRPO steps of the three RL arms.")
    p.add_argument("--rejection-questions", type=int, default=128,
                   help="Rejection sampling: questions × 5 samples (Search-R1's budget: "
                   "steps × 8 prompts × 4 samples = 640 at 20 steps).")  # fmt: skip
    p.add_argument("--sft-set", action="append", default=[], help="Warm-start override k=v.")
    p.add_argument("--rl-set", action="append", default=[], help="RL override k=v.")
    p.add_argument("--batch-size", type=int, default=16, help="Evaluation batch size.")
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--archive", type=Path, help="Copy what the table reads into this folder.")
    return p.parse_args()


def all_stages() -> list[str]:
    trains = ["sft", "direct-ft", "rag-ft", "search-r1", "unmasked", "r1", "rejection"]
    return ["index:bm25", "index:dense", "recall", *(f"train:{t}" for t in trains),
            *(f"eval:{c.name}" for c in CELLS), *(f"check:{c.name}" for c in CELLS),
            "compare", "table"]  # fmt: skip


class Times:
    """Wall and CPU seconds of every stage (children's user + system time), in OUT/times.json;
    a stage resumed in several sessions adds up, and stages run by several processes at once
    into one OUT are all kept (the file is read again before each write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict[str, float]] = (
            json.loads(path.read_text()) if path.is_file() else {}
        )

    def run(self, stage: str, argv: list[str], log: Path) -> None:
        """Run one stage's command, its output shown and kept in `log`; record its times."""
        log.parent.mkdir(parents=True, exist_ok=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        print(f"[{time.strftime('%H:%M:%S')}] {stage}: {' '.join(argv[2:])}", flush=True)
        with log.open("ab") as handle:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                handle.write(line)
                handle.flush()  # the log can be followed while the stage runs
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
            code = proc.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if self.path.is_file():  # another process may have run stages meanwhile: add to them
            self.rows = json.loads(self.path.read_text())
        row = self.rows.setdefault(stage, {"wall_s": 0.0, "cpu_s": 0.0})
        row["wall_s"] += time.monotonic() - start
        row["cpu_s"] += cpu
        self.path.write_text(json.dumps(self.rows, indent=2) + "\n")
        if code != 0:
            raise SystemExit(f"{stage} failed (exit {code}); see {log}")


def _model(out: Path, stage: str) -> Path:
    return out / "train" / stage.split(":", 1)[1] / "model"


def _done(path: Path) -> bool:
    return path.is_file()


def _index(args: argparse.Namespace, kind: str | None = None) -> Path:
    if args.index is not None and kind in (None, args.retriever):
        return args.index
    return args.out / "index" / (kind or args.retriever)


def train_command(args: argparse.Namespace, name: str) -> list[str]:
    """The `searchrl sft` / `searchrl train` command of one training stage."""
    out = args.out / "train" / name
    files = json.dumps([f"{args.qa}/nq.jsonl[1000:]", f"{args.qa}/hotpotqa.jsonl[1000:]"])
    data = [f"data.index_dir={_index(args)}", f"seed={args.seed}", f"data.train_files={files}"]
    sft = [*SEARCHRL, "sft", "--config", "wiki_cpu_sft", "--out", str(out), "--force", *data]
    warm = f"policy.init_checkpoint={_model(args.out, 'train:sft')}"
    if name in ("sft", "direct-ft", "rag-ft"):
        source = {"sft": "references", "direct-ft": "direct", "rag-ft": "rag"}[name]
        return [*sft, f"source={source}", *args.sft_set]
    if name == "rejection":
        return [*sft, "source=rejection", warm, f"max_examples={args.rejection_questions}",
                "rejection_samples=5", *args.sft_set]  # fmt: skip
    arm = {"search-r1": [], "unmasked": ["algo.mask_env=false"], "r1": ["rollout.search=false"]}
    resume = ["--resume"] if (out / "checkpoints").is_dir() else []
    return [*SEARCHRL, "train", "--config", "wiki_cpu_grpo", "--out", str(out), *resume, *data,
            "data.eval_size=0", "data.val_files=[]", warm, f"steps={args.steps}",
            *arm[name], *args.rl_set]  # fmt: skip


def eval_command(args: argparse.Namespace, cell: Cell, check: bool = False) -> list[str]:
    """`searchrl eval` of one cell on the first `--limit` rows of the seven sets, or with
    `check` on CHECK_ROWS into OUT/check/<cell>."""
    if cell.model == "before":
        if args.before is None:
            raise SystemExit("eval:before needs --before MODEL (the warm start to compare with)")
        model = str(args.before)
    elif cell.model in ("embedded", "embedded-warm"):
        model = cell.model
    else:
        model = str(_model(args.out, cell.model))
    trained = cell.model != "embedded" and cell.method not in ("direct-ft", "rag-ft")
    sets = [*BUDGET, *(TRAINED_EVAL if trained else ())]
    data = [x for rows in CHECK_ROWS for x in ("--data", str(args.qa / rows))] if check else [
        "--data", str(args.qa), "--limit", str(args.limit)]  # fmt: skip
    folder = args.out / ("check" if check else "evals") / cell.name
    argv = [*SEARCHRL, "eval", "--method", cell.method, "--model", model, *data,
            "--out", str(folder), "--batch-size", str(args.batch_size)]  # fmt: skip
    if cell.retrieval:
        argv += ["--index", str(_index(args))]
    return argv + [x for s in sets for x in ("--set", s)]


def run_stage(args: argparse.Namespace, stage: str, times: Times) -> None:
    """One stage, unless its output is complete."""
    kind, _, name = stage.partition(":")
    log = args.out / "logs" / f"{stage.replace(':', '-')}.log"
    if kind == "index":
        if not _done(_index(args, name) / "manifest.json"):
            argv = [*SEARCHRL, "index", "--kind", name, "--corpus", str(args.corpus),
                    "--out", str(_index(args, name)), "--force"]  # fmt: skip
            times.run(stage, argv, log)
    elif kind == "recall":
        if not _done(args.out / "recall.json"):
            script = str(Path(__file__).with_name("real_qa_report.py"))
            argv = [sys.executable, script, "recall", "--out", str(args.out), "--qa",
                    str(args.qa), "--limit", str(args.limit)]  # fmt: skip
            times.run(stage, argv, log)
    elif kind == "train":
        if not _done(_model(args.out, stage) / "config.json"):
            times.run(stage, train_command(args, name), log)
    elif kind in ("eval", "check"):
        cell = next(c for c in CELLS if c.name == name)
        folder = args.out / ("evals" if kind == "eval" else "check") / name
        if not _done(folder / "summary.json") or _incomplete(folder):
            times.run(stage, eval_command(args, cell, check=kind == "check"), log)
    elif kind == "compare":
        for first, second in PAIRS:
            a, b = (args.out / "evals" / n for n in (first, second))
            target = args.out / "compare" / f"{first}_vs_{second}.json"
            if (a / "summary.json").is_file() and (b / "summary.json").is_file():
                argv = [*SEARCHRL, "eval", "compare", str(a), str(b), "--out", str(target),
                        "--force"]  # fmt: skip
                times.run(f"compare:{first}-{second}", argv, log)
    elif kind == "table":
        write_table(args)
    else:
        raise SystemExit(f"unknown stage {stage!r}; known: {', '.join(all_stages())}")


def _incomplete(folder: Path) -> bool:
    summary = json.loads((folder / "summary.json").read_text())
    return int(summary.get("missing", 0)) > 0


def write_table(args: argparse.Namespace) -> str:
    """OUT/table.md from what the stages left (any subset)."""
    text = table_markdown(args.out, [c.name for c in CELLS], PAIRS)
    if (args.out / "check").is_dir():
        text += "\nThe outside check (" + ", ".join(CHECK_ROWS) + "):\n\n"
        text += grid(args.out, [c.name for c in CELLS], folder="check")
    recall = args.out / "recall.json"
    if recall.is_file():
        text += "\n" + recall_table(json.loads(recall.read_text()))
    (args.out / "table.md").write_text(text)
    print(text)
    return text


def main() -> None:
    args = parse_args()
    os.environ.setdefault("SEARCHRL_THREADS", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    args.out, args.qa, args.corpus = args.out.resolve(), args.qa.resolve(), args.corpus.resolve()
    times = Times(args.out / "times.json")
    stages = args.stages.split(",") if args.stages else all_stages()
    if args.table_only:
        stages = ["table"]
    for number, stage in enumerate(stages, start=1):
        print(f"== stage {number}/{len(stages)}: {stage}", flush=True)
        run_stage(args, stage, times)
    if args.archive is not None:
        written = archive(args.out, args.archive, [c.name for c in CELLS])
        print(f"archived {len(written)} files into {args.archive}")


if __name__ == "__main__":
    main()
