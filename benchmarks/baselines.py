"""The papers' Table 2 on our data: every method of both papers, on the synthetic world's test
split (its own corpus, BM25) and on the seven shared QA sets (the shared Wikipedia corpus,
BM25 and dense), greedy, with 95% bootstrap intervals.

    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/baselines.py --out runs/baselines \
        --world runs/demo/world --limit 50 \
        --sft runs/demo/sft/model --search-r1 runs/demo/grpo/model \
        --r1 runs/r1/model --rejection runs/rejection/model
    python benchmarks/baselines.py --out runs/baselines --table-only   # table of what ran

Resumable: every (data, retriever, method) cell is a `searchrl eval` folder under
`OUT/evals/`, so a killed run continues where it stopped and a rerun with new checkpoints only
evaluates the new cells. Prompted baselines (Direct, CoT, RAG, IRCoT, Search-o1) run the
embedded instruct model; trained methods run only when their checkpoint is given. Writes
`OUT/table.md` and prints it.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from searchrl.config.eval import EvalConfig
from searchrl.config.loading import load_config
from searchrl.data.benchmarks import BENCHMARKS
from searchrl.eval.harness import Resources, evaluate, load_sets
from searchrl.eval.registry import method as lookup
from searchrl.models.loading import load_policy
from searchrl.retrieval import build_index, load_index

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
PROMPTED = ("direct", "cot", "rag", "ircot", "search-o1")
TRAINED = ("sft", "r1", "rejection", "search-r1", "search-r2")


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
    parser.add_argument("--world", type=Path, help="World folder (test.jsonl, corpus.jsonl).")
    parser.add_argument("--qa", type=Path, default=SHARED / "qa")
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpus" / "wiki_paragraphs.jsonl")
    parser.add_argument("--limit", type=int, default=50, help="Questions per QA set.")
    parser.add_argument("--world-limit", type=int, default=100, help="World test questions.")
    parser.add_argument("--retrievers", default="bm25,dense", help="For the QA sets.")
    parser.add_argument("--methods", default=",".join(PROMPTED + TRAINED))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--set", action="append", default=[], help="EvalConfig override.")
    parser.add_argument("--table-only", action="store_true")
    for name in TRAINED:
        parser.add_argument(f"--{name}", type=Path, help=f"{name} checkpoint directory.")
    return parser.parse_args()


def indexes(args: argparse.Namespace) -> dict[str, Path]:
    """Index folders by name, built once under OUT/index."""
    wanted = {}
    if args.world is not None:
        wanted["world-bm25"] = ("bm25", args.world / "corpus.jsonl")
    for kind in args.retrievers.split(","):
        wanted[f"wiki-{kind}"] = (kind, args.corpus)
    found = {}
    for name, (kind, corpus) in wanted.items():
        folder = args.out / "index" / name
        if not (folder / "manifest.json").is_file():
            build_index(kind, corpus, folder)  # type: ignore[arg-type]
        found[name] = folder
    return found


def cells(args: argparse.Namespace) -> list[Cell]:
    """Every cell to evaluate: the world first, then the QA sets without retrieval, then per
    retriever; trained methods only with a checkpoint."""
    given = [m for m in args.methods.split(",") if m in PROMPTED or _checkpoint(args, m)]
    out = []
    for data, retrievers in (("world", ["bm25"]), ("wiki", args.retrievers.split(","))):
        if data == "world" and args.world is None:
            continue
        for retriever in ["none", *retrievers]:
            for name in given:
                if lookup(name).retrieval == (retriever != "none"):
                    out.append(Cell(data, retriever, name))
    return out


def _checkpoint(args: argparse.Namespace, method: str) -> Path | None:
    return getattr(args, method.replace("-", "_"), None) if method in TRAINED else None


def run_cells(args: argparse.Namespace, todo: list[Cell], console: Console) -> None:
    base = load_config(EvalConfig, None, args.set)
    found = indexes(args)

    @functools.cache
    def policy(model: str):  # one load per checkpoint, shared by the cells that use it
        return load_policy(
            replace(base.model, name_or_path=model), max_model_len=base.rollout.max_total_tokens
        )

    @functools.cache
    def retriever(name: str):
        return load_index(found[name])

    for cell in todo:
        checkpoint = _checkpoint(args, cell.method)
        model = str(checkpoint) if checkpoint else "embedded"
        config = replace(
            base,
            method=cell.method,
            batch_size=args.batch_size,
            model=replace(base.model, name_or_path=model),
        )
        if cell.data == "world":
            questions = load_sets([str(args.world / "test.jsonl")], args.world_limit)
        else:
            questions = load_sets(
                [str(args.qa / f"{b.name}.jsonl") for b in BENCHMARKS], args.limit
            )
        index = f"{cell.data}-{cell.retriever}" if cell.retriever != "none" else None
        resources = Resources(
            open_retriever=lambda index=index: retriever(index),
            load_policy=lambda model=model: policy(model),
        )
        console.rule(f"{cell.name} ({len(questions)} questions, model {model})")
        started = time.perf_counter()
        evaluate(config, questions, args.out / "evals" / cell.name, resources)
        console.print(f"{cell.name}: {time.perf_counter() - started:.0f} s")


def _em(summary: dict, block: str | None = None, set_name: str | None = None) -> str:
    estimate = summary["by_set"].get(set_name, {}).get("em") if set_name else summary[block]["em"]
    if not estimate:
        return "–"
    half = (estimate["high"] - estimate["low"]) / 2
    return f"{estimate['mean']:.3f} ±{half:.2f}"


def table(args: argparse.Namespace) -> str:
    """Markdown: one row per (method, retriever); EM ± half the 95% interval per set."""
    sets = [b.name for b in BENCHMARKS]
    header = ["method", "retriever", *sets, "avg (7)", "general", "multi-hop", "world", "searches"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for folder in sorted((args.out / "evals").glob("*/summary.json")):
        summary = json.loads(folder.read_text())
        data, rest = folder.parent.name.split("-", 1)
        retriever, method = rest.split("-", 1)
        row = rows.setdefault((method, retriever), {})
        if data == "world":
            row["world"] = _em(summary, "overall")
            continue
        for name in sets:
            row[name] = _em(summary, set_name=name)
        row["avg (7)"] = _em(summary, "average")
        for category in ("general", "multi-hop"):
            block = summary["by_category"].get(category)
            row[category] = _em({"x": block}, "x") if block else "–"
        row["searches"] = f"{summary['overall']['searches']['mean']:.2f}"
    order = {m: i for i, m in enumerate(PROMPTED + TRAINED)}
    for (method, retriever), row in sorted(
        rows.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])
    ):
        lines.append(
            "| " + " | ".join([method, retriever] + [row.get(h, "–") for h in header[2:]]) + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    console = Console()
    if not args.table_only:
        args.out.mkdir(parents=True, exist_ok=True)
        run_cells(args, cells(args), console)
    text = table(args)
    (args.out / "table.md").write_text(text)
    console.print(text)


if __name__ == "__main__":
    main()
