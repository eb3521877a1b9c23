"""How small can the shipped warm start be? LoRA adapters of a warm start at several ranks
(`searchrl.models.warm`), each merged into the embedded base and evaluated like the warm start
itself on held-out real questions (NQ, HotpotQA and 2WikiMultihopQA rows 500-599: never
trained on, never evaluated in Table 2), against the full warm start and the base model.

    python benchmarks/training/warm_adapter.py --tuned runs/real_qa/train/sft/model \\
        --out runs/warm --ranks 8,16,32 --index runs/wiki/index-dense     # every stage
    python benchmarks/training/warm_adapter.py ... --stages extract,eval:r16   # some of them
    python benchmarks/training/warm_adapter.py ... --ship 8 --table2 runs/real_qa/evals/shipped
        # rank 8's adapter into the package, its card with the Table 2 scores of that folder

Stages: `extract` (every rank's adapter, its size and the share of the weight change it keeps,
the merged model), `eval:full`, `eval:base`, `eval:r<R>`, `eval:shipped` (`--model
embedded-warm`, the package's own adapter, loaded as users load it), `table` (OUT/table.md).
Each evaluation is its own resumable `searchrl eval` process with its progress bar.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QA = REPO.parent / "shared" / "data" / "qa"
HELD_OUT = ("nq.jsonl[500:600]", "hotpotqa.jsonl[500:600]", "2wikimultihopqa.jsonl[500:600]")
"""300 held-out questions: rows the warm starts are chosen on (docs/baselines.md)."""
BUDGETS = ("rollout.max_response_tokens=200", "rollout.max_obs_tokens=500",
           "rollout.max_total_tokens=3072", "rollout.max_turns=5",
           "rollout.force_answer=true")  # fmt: skip
"""The trained search policies' evaluation budgets of Table 2 (benchmarks/real_qa.py)."""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tuned", type=Path, required=True, help="The full warm start's model dir.")
    p.add_argument("--base", default="embedded", help="The model the warm start was tuned from.")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ranks", default="8,16,32")
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--qa", type=Path, default=QA)
    p.add_argument("--stages", default="", help="Comma list (default: all).")
    p.add_argument("--ship", type=int, help="Copy this rank's adapter into the package.")
    p.add_argument(
        "--table2",
        type=Path,
        help="With --ship: an evaluation folder of the "
        "shipped adapter on Table 2's rows, whose scores go into its card.",
    )
    p.add_argument("--source", default="", help="With --ship: how the warm start was made.")
    return p.parse_args()


def extract(args: argparse.Namespace, ranks: list[int]) -> None:
    """Every rank's adapter and merged model, with its fidelity, in OUT/fidelity.json."""
    from searchrl.config.model import ModelConfig
    from searchrl.models.loading import load_model
    from searchrl.models.warm import low_rank_adapter, merge_adapter

    base = load_model(ModelConfig(name_or_path=args.base, dtype="float32"))
    tuned = load_model(ModelConfig(name_or_path=str(args.tuned), dtype="float32")).model
    rows = {}
    for rank in ranks:
        folder = args.out / f"r{rank}"
        fidelity = low_rank_adapter(copy.deepcopy(base.model), tuned, rank, folder / "adapter")
        merged = merge_adapter(copy.deepcopy(base.model), folder / "adapter")
        merged.save_pretrained(folder / "model")
        base.tokenizer.save_pretrained(folder / "model")
        size = (folder / "adapter" / "adapter_model.safetensors").stat().st_size
        rows[f"r{rank}"] = {"rank": rank, "kept_energy": fidelity.kept_energy,
                            "parameters": fidelity.parameters, "bytes": size}  # fmt: skip
        millions, mib = fidelity.parameters / 1e6, size / 2**20
        print(f"rank {rank}: keeps {fidelity.kept_energy:.3f} of the change, "
              f"{millions:.2f}M parameters, {mib:.1f} MiB", flush=True)  # fmt: skip
    (args.out / "fidelity.json").write_text(json.dumps(rows, indent=2) + "\n")


def model_of(args: argparse.Namespace, name: str) -> str:
    return {"full": str(args.tuned), "base": "embedded", "shipped": "embedded-warm"}.get(
        name, str(args.out / name / "model")
    )


def evaluate(args: argparse.Namespace, name: str) -> None:
    out = args.out / "evals" / name
    if (out / "summary.json").is_file():
        return
    argv = [sys.executable, "-m", "searchrl", "eval", "--method", "sft", "--model",
            model_of(args, name), "--index", str(args.index), "--out", str(out)]  # fmt: skip
    for data in HELD_OUT:
        argv += ["--data", str(args.qa / data)]
    for budget in BUDGETS:
        argv += ["--set", budget]
    subprocess.run(argv, check=True)


def table(args: argparse.Namespace, names: list[str]) -> str:
    """EM with its interval, answered share, searches per question, adapter size."""
    fidelity = json.loads((args.out / "fidelity.json").read_text()) if (
        args.out / "fidelity.json").is_file() else {}  # fmt: skip
    lines = ["| model | adapter | kept change | EM [95%] | NQ | HotpotQA | answered | "
             "searches / q |", "|---|---:|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for name in names:
        path = args.out / "evals" / name
        if not (path / "summary.json").is_file():
            continue
        s = json.loads((path / "summary.json").read_text())
        rows = [json.loads(x) for x in (path / "samples.jsonl").read_text().splitlines() if x]
        answered = sum(r.get("stop_reason") == "answer" for r in rows) / len(rows)
        em, by_set = s["overall"]["em"], s.get("by_set", {})
        f = fidelity.get(name, {})
        size = f"{f['bytes'] / 2**20:.1f} MiB" if f else "–"
        kept = f"{f['kept_energy']:.2f}" if f else "–"
        lines.append(
            f"| {name} | {size} | {kept} | {em['mean']:.3f} [{em['low']:.2f}, {em['high']:.2f}] | "
            f"{by_set.get('nq', {}).get('em', {}).get('mean', 0):.2f} | "
            f"{by_set.get('hotpotqa', {}).get('em', {}).get('mean', 0):.2f} | "
            f"{answered:.2f} | {s['overall']['searches']['mean']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(text)
    return text


def table2_scores(summary: dict) -> dict:
    """EM with its 95% interval per set and the seven-set Avg., searches per question."""

    def estimate(block: dict) -> dict:
        return {k: round(block["em"][k], 4) for k in ("mean", "low", "high")} | {
            "n": block["n"]}  # fmt: skip

    scores = {name: estimate(block) for name, block in summary["by_set"].items()}
    scores["avg"] = {k: round(summary["average"]["em"][k], 4) for k in ("mean", "low", "high")}
    scores["searches_per_question"] = round(summary["overall"]["searches"]["mean"], 3)
    scores["rows"] = "0-99 of each of the seven sets (Bamboogle 0-83), docs/baselines.md"
    return scores


def ship(args: argparse.Namespace, rank: int, names: list[str]) -> None:
    """The chosen adapter into src/searchrl/models/warm, with a card saying what it is."""
    from searchrl.models.warm import shipped_adapter

    dest = shipped_adapter()
    source = args.out / f"r{rank}" / "adapter"
    for file in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copyfile(source / file, dest / file)
    summaries = {n: json.loads((args.out / "evals" / n / "summary.json").read_text())
                 for n in names if (args.out / "evals" / n / "summary.json").is_file()}  # fmt: skip
    card = {
        "rank": rank,
        "source": args.source or str(args.tuned),
        "fidelity": json.loads((args.out / "fidelity.json").read_text()).get(f"r{rank}"),
        # `shipped` was evaluated before this adapter replaced it: the card calls it `previous`
        "held_out_em": {
            ("previous" if n == "shipped" else n): s["overall"]["em"]["mean"]
            for n, s in summaries.items()
        },
        "held_out": list(HELD_OUT),
        "budgets": list(BUDGETS),
    }
    if args.table2 is not None:
        card["table2"] = table2_scores(json.loads((args.table2 / "summary.json").read_text()))
    (dest / "searchrl_card.json").write_text(json.dumps(card, indent=2) + "\n")
    print(f"shipped rank {rank} into {dest}")


def main() -> None:
    from searchrl.utils.quiet import quiet_libraries

    quiet_libraries()  # before transformers is imported: its "Writing model shards" bar
    args = parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    names = ["base", "full", *(f"r{r}" for r in ranks), "shipped"]
    args.out.mkdir(parents=True, exist_ok=True)
    stages = args.stages.split(",") if args.stages else [
        "extract", *(f"eval:{n}" for n in names), "table"]  # fmt: skip
    for stage in stages:
        print(f"== {stage}", flush=True)
        if stage == "extract":
            extract(args, ranks)
        elif stage.startswith("eval:"):
            evaluate(args, stage.split(":", 1)[1])
        elif stage == "table":
            print(table(args, names))
    if args.ship is not None:
        ship(args, args.ship, names)


if __name__ == "__main__":
    main()
