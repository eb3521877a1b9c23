"""Which observation budget (`rollout.max_obs_tokens`) and top-k (`rollout.topk`) should the
real-data presets use? Answer recall of the passages a policy is *shown* — the question's top-k,
its `<information>` block cut to the budget exactly as the rollout cuts it — for every pair,
with the tokens an observation costs, on rows that are never reported (the seven sets' rows
500-999 by default; rows 0-99 are Table 2's and rows 100-299 the outside check's).

    python benchmarks/eval/obs_budget.py --index /work/indexes/wiki_dense --out runs/obs_budget
    python benchmarks/eval/obs_budget.py --index IDX --out OUT --rows 1000:1500 --sets nq,hotpotqa

Prints one table per set and the seven-set mean; writes OUT/obs_budget.json. One search per
question (the largest k), the smaller k are its prefixes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_qa_report import LABELS, SETS

REPO = Path(__file__).resolve().parents[2]
QA = REPO.parent / "shared" / "data" / "qa"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--qa", type=Path, default=QA)
    p.add_argument("--rows", default="500:1000", help="Rows a:b of each set (never 0:300).")
    p.add_argument("--sets", default=",".join(s for s in SETS if s != "bamboogle"))
    p.add_argument("--topk", default="2,3,4,5")
    p.add_argument("--budgets", default="300,400,500,600,700,900")
    return p.parse_args()


def measure(args: argparse.Namespace) -> dict:
    """Per set, k and budget: recall of the shown passages, and mean observation tokens."""
    from searchrl.config.model import ModelConfig
    from searchrl.data.templates import format_information
    from searchrl.eval.evidence import holds_answer
    from searchrl.eval.sets import load_sets
    from searchrl.models.loading import load_tokenizer
    from searchrl.retrieval.index import load_index
    from searchrl.rollout.rows import observation_ids
    from searchrl.utils.progress import progress_bar

    first, last = (int(x) for x in args.rows.split(":"))
    if first < 300:
        raise SystemExit("--rows must start at 300 or later: rows 0-299 are reported")
    ks = [int(k) for k in args.topk.split(",")]
    budgets = [int(b) for b in args.budgets.split(",")]
    tokenizer = load_tokenizer(ModelConfig())
    retriever = load_index(args.index)
    result: dict = {"rows": args.rows, "topk": ks, "budgets": budgets, "sets": {}}
    for name in args.sets.split(","):
        questions = load_sets([f"{args.qa / name}.jsonl[{first}:{last}]"], 0)
        found = {f"{k}/{b}": 0 for k in ks for b in [*budgets, 0]}
        tokens = {k: 0 for k in ks}
        started = time.perf_counter()
        with progress_bar(f"recall ({name})", len(questions), unit="questions") as advance:
            for start in range(0, len(questions), 64):
                chunk = questions[start : start + 64]
                for q, hits in zip(chunk, retriever.search([q.question for q in chunk], max(ks)),
                                   strict=True):  # fmt: skip
                    for k in ks:
                        text = format_information([h.document.contents for h in hits[:k]])
                        whole = observation_ids(tokenizer, text, 10**6)[0]
                        tokens[k] += len(whole)
                        found[f"{k}/0"] += holds_answer(text, q.golden_answers)
                        for b in budgets:
                            ids, cut = observation_ids(tokenizer, text, b)
                            shown = tokenizer.decode(ids) if cut else text
                            found[f"{k}/{b}"] += holds_answer(shown, q.golden_answers)
                advance(len(chunk))
        n = len(questions)
        result["sets"][name] = {
            "n": n,
            "recall": {key: value / n for key, value in found.items()},
            "tokens": {str(k): tokens[k] / n for k in ks},
            "seconds": time.perf_counter() - started,
        }
    return result


def table(result: dict) -> str:
    """Rows: top-k and budget (0 = whole); columns: the sets, their mean, tokens shown."""
    names = list(result["sets"])
    labels = [LABELS[SETS.index(n)] if n in SETS else n for n in names]
    lines = ["| top-k | budget | " + " | ".join(labels) + " | mean | tokens (whole) |",
             "|---|---|" + "---:|" * (len(names) + 2)]  # fmt: skip
    for k in result["topk"]:
        for b in [*result["budgets"], 0]:
            values = [result["sets"][n]["recall"][f"{k}/{b}"] for n in names]
            tokens = sum(result["sets"][n]["tokens"][str(k)] for n in names) / len(names)
            cells = " | ".join(f"{v:.3f}" for v in values)
            shown = "whole" if b == 0 else str(b)
            lines.append(
                f"| {k} | {shown} | {cells} | {sum(values) / len(values):.3f} | {tokens:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    (args.out / "obs_budget.json").write_text(json.dumps(result, indent=2) + "\n")
    text = table(result)
    (args.out / "obs_budget.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
