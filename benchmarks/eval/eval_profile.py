"""Where does an evaluation's time go? `searchrl eval` of a search policy with every generation
call and every search timed: how many rows each call decoded, the tokens it made, and how much
of the time went to calls that decoded one or two rows (a long turn holding a call whose other
rows had stopped, issue 64).

    python benchmarks/eval/eval_profile.py --data ../shared/data/qa/nq.jsonl[500:700] \\
        --index /work/indexes/wiki_dense --out runs/profile/chunk64
    python benchmarks/eval/eval_profile.py ... --out runs/profile/one_call \\
        --set rollout.decode_chunk=0

Budgets are `searchrl eval`'s defaults (500 / 500 / 4096 tokens) with the issue's
`rollout.max_turns=5 rollout.force_answer=true`; `--set` changes any of them. Prints the wall
time, EM, and the calls by width; OUT/calls.jsonl keeps every call. Resumes nothing: a rerun
needs a fresh --out (it times a whole evaluation).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

DEFAULTS = ("rollout.max_turns=5", "rollout.force_answer=true")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="embedded-warm")
    p.add_argument("--method", default="search-r1")
    p.add_argument("--set", action="append", default=[], help="EvalConfig override k=v.")
    return p.parse_args()


def timed(calls: list[dict[str, Any]], log: Path):
    """Wrap a backend's `generate` so each call is logged."""

    def wrap(generate):
        def generate_timed(prompts, params):
            start = time.perf_counter()
            outs = generate(prompts, params)
            calls.append({
                "rows": len(prompts), "context": sum(map(len, prompts)),
                "tokens": sum(len(o.token_ids) for o in outs),
                "longest": max(len(o.token_ids) for o in outs),
                "seconds": time.perf_counter() - start,
            })  # fmt: skip
            with log.open("a") as handle:
                handle.write(json.dumps(calls[-1]) + "\n")
            return outs

        return generate_timed

    return wrap


def main() -> None:
    from searchrl.config.eval import EvalConfig
    from searchrl.config.loading import load_config
    from searchrl.eval.harness import Resources, evaluate, retriever_identity
    from searchrl.eval.sets import load_sets
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import open_retriever

    args = parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: a profile times a whole evaluation, use a new one")
    args.out.mkdir(parents=True)
    overrides = [*DEFAULTS, f"method={args.method}", f"model.name_or_path={args.model}", *args.set]
    config = load_config(EvalConfig, None, overrides)
    calls: list[dict[str, Any]] = []
    wrap = timed(calls, args.out / "calls.jsonl")

    def load():
        policy = load_policy(config.model, max_model_len=config.rollout.max_total_tokens)
        policy.backend.generate = wrap(policy.backend.generate)
        return policy

    resources = Resources(
        lambda: open_retriever(args.index, None), load, retriever_identity(args.index, None)
    )
    started = time.perf_counter()
    summary = evaluate(config, load_sets([args.data], 0), args.out / "eval", resources)
    wall = time.perf_counter() - started
    widths: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for call in calls:
        key = "1-2 rows" if call["rows"] <= 2 else "3+ rows"
        widths[key][0] += 1
        widths[key][1] += call["seconds"]
        widths[key][2] += call["tokens"]
    print(f"wall {wall:.0f} s · EM {summary['overall']['em']['mean']:.3f} · "
          f"{len(calls)} generation calls")  # fmt: skip
    print("| calls decoding | calls | seconds | tokens |\n|---|---:|---:|---:|")
    for key, (n, seconds, tokens) in sorted(widths.items()):
        print(f"| {key} | {n} | {seconds:.0f} | {tokens} |")


if __name__ == "__main__":
    main()
