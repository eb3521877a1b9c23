"""Does each generation engine sample from the policy's distribution? (`models.sampler_check`)

Per engine and seed, in a fresh process: roll out `--questions` × `--samples` of a world at
temperature 1 (the `searchrl rollout` defaults otherwise), then teacher-force every sampled
policy token through the fp32 policy: mean log p(sampled) and minus the mean entropy there
must agree; their difference is printed with its standard error and z. Then `--draws`
one-token draws at the sampled position whose top token has p closest to 0.9, against the
fp32 softmax (chi-square), and EM of the rollouts. Engines: `hf`, `vllm` (the dtype each picks
here: a bf16 copy / bf16 engine where bf16 is fast), `hf-fp32`, `vllm-fp32` (fp32: the
sampler alone). Resumable: each (engine, seed) is a JSON file under --out.

    python benchmarks/rollout/sampler_check.py --model S/model --world S/world --engines hf,vllm \\
        --seeds 0,1 --out runs/sampler
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ENGINES = {
    "hf": {"backend": "hf"},
    "hf-fp32": {"backend": "hf", "generation_dtype": "float32"},
    "vllm": {"backend": "vllm"},
    "vllm-fp32": {"backend": "vllm", "generation_dtype": "float32"},
}


def run_one(args: argparse.Namespace, engine: str, seed: int) -> dict[str, object]:
    """Roll out, teacher-force, draw (in the child process)."""
    from searchrl.config.model import ModelConfig
    from searchrl.config.rollout import RolloutConfig
    from searchrl.data.benchmarks import load_flashrag_jsonl
    from searchrl.models import sampler_check as sc
    from searchrl.models.loading import load_model, load_policy
    from searchrl.models.precision import cpu_summary
    from searchrl.retrieval.bm25 import BM25Retriever
    from searchrl.retrieval.corpus import read_corpus
    from searchrl.rollout.loop import run_rollouts

    world = Path(args.world)
    questions = load_flashrag_jsonl(world / f"{args.split}.jsonl", "world")[: args.questions]
    retriever = BM25Retriever.build(read_corpus(world / "corpus.jsonl"))
    rollout = RolloutConfig(temperature=1.0)
    config = replace(ModelConfig(name_or_path=args.model), **ENGINES[engine])  # type: ignore[arg-type]
    started = time.perf_counter()
    policy = load_policy(config, max_model_len=rollout.max_total_tokens, seed=seed)
    trajectories = run_rollouts(
        policy.backend, policy.tokenizer, retriever, questions, rollout,
        n_samples=args.samples, seed=seed,
    )  # fmt: skip
    rollout_s = time.perf_counter() - started
    scorer = load_model(replace(ModelConfig(name_or_path=args.model), dtype="float32")).model
    sequences = []
    for traj in trajectories:
        ids, sampled = list(traj.prompt_ids), [False] * len(traj.prompt_ids)
        for segment in traj.segments:
            ids.extend(segment.token_ids)
            sampled.extend([segment.role == "policy"] * len(segment.token_ids))
        sequences.append((ids, sampled))
    scores = sc.teacher_forced(scorer, sequences)
    result, top = sc.gap(scores), sc.top_rate(scores)
    block = 32 if engine.startswith("vllm") else 1
    position = sc.confident(scorer, sequences, scores, align=block)
    counts = sc.next_token_draws(policy.backend, position.context, args.draws, seed=seed)
    draws = sc.chi_square(counts, position.probs)
    bins = sc.likely_tokens(position.probs, args.draws)
    own = sc.chi_square_bins(counts, sc.engine_probs(policy.backend, position.context, list(bins)))
    shift = batch_shift(policy.backend, position.context, list(bins), sequences)
    backend = policy.backend
    dtype = getattr(backend, "dtype", None) or getattr(backend, "generation_dtype", None)
    close = getattr(backend, "close", None)
    if callable(close):
        close()
    return {
        "engine": engine,
        "seed": seed,
        "dtype": str(dtype or "float32").removeprefix("torch."),
        "trajectories": len(trajectories),
        "em": sum(t.metrics.get("em", 0.0) for t in trajectories) / len(trajectories),
        "tokens": result.tokens,
        "mean_logprob": result.mean_logprob,
        "mean_entropy": result.mean_entropy,
        "gap": result.mean,
        "se": result.se,
        "sum_d2": float(((scores.logps + scores.entropies).double() ** 2).sum()),
        "top_share_all": top.share,
        "top_expected_all": top.expected,
        "top_se_all": top.se,
        "draws": draws.draws,
        "top_prob": draws.top_prob,
        "top_share": draws.top_share,
        "chi2": draws.statistic,
        "dof": draws.dof,
        "chi2_p": draws.p_value,
        "engine_top_prob": own.top_prob,
        "engine_chi2": own.statistic,
        "engine_chi2_p": own.p_value,
        "batch_shift": shift,
        "context_tokens": len(position.context),
        "context": position.context,
        "rollout_s": rollout_s,
        "cpu": cpu_summary(),
    }


def batch_shift(backend: object, context: list[int], tokens: list[int], sequences: list) -> float:
    """vLLM: the largest change of the engine's log-probs of `tokens` after `context` when the
    same request runs next to 63 others (prefixes of other rollouts) instead of alone (nan for
    HF): batch-shape dependent kernels make a bf16 engine's distribution move with its batch."""
    if not hasattr(backend, "score"):
        return float("nan")
    wanted = [[[t] for t in tokens]]
    (alone,) = backend.score([context], wanted)
    backend.clear_cache()  # type: ignore[attr-defined]
    others = [list(ids[: len(ids) // 2]) for ids, _ in sequences[:63]]
    together = backend.score([context, *others], wanted + [[[tokens[0]]]] * len(others))[0]
    return max(abs(a - b) for a, b in zip(alone, together, strict=True))


Row = dict[str, float]


def pooled(rows: list[Row]) -> tuple[float, float, int, float]:
    """Gap, its standard error and token count over several runs, and their mean EM
    (weighted by trajectories)."""
    n = int(sum(r["tokens"] for r in rows))
    mean = sum(r["gap"] * r["tokens"] for r in rows) / n
    second = sum(r["sum_d2"] for r in rows) / n
    se = math.sqrt(max(second - mean**2, 0.0) / max(n - 1, 1))
    trajectories = sum(r["trajectories"] for r in rows)
    em = sum(r["em"] * r["trajectories"] for r in rows) / trajectories
    return mean, se, n, em


def table(results: list[Row], labels: list[tuple[str, int, str]]) -> str:
    """Per run, then per engine over its seeds; `labels` = (engine, seed, dtype) per run."""
    lines = [
        "| engine | seed | dtype | tokens | mean log p | −mean H | log p + H ± SE | z "
        "| top token sampled vs expected (z) | one-token draws: top share vs p (chi² p) "
        "| vs the engine's own p (chi² p) | EM (rollouts) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r, (engine, seed, dtype) in zip(results, labels, strict=True):
        draws = f"{r['top_share']:.4f} vs {r['top_prob']:.4f} ({r['chi2_p']:.2g})"
        nan = float("nan")
        z = (r.get("top_share_all", nan) - r.get("top_expected_all", nan)) / r.get(
            "top_se_all", nan
        )
        hits = (
            f"{r.get('top_share_all', nan):.4f} vs {r.get('top_expected_all', nan):.4f} ({z:+.2f})"
        )
        own = f"{r.get('engine_top_prob', nan):.4f} ({r.get('engine_chi2_p', nan):.2g})"
        lines.append(
            f"| {engine} | {seed} | {dtype} | {int(r['tokens'])} | {r['mean_logprob']:.4f} "
            f"| {-r['mean_entropy']:.4f} | {r['gap']:+.4f} ± {r['se']:.4f} "
            f"| {r['gap'] / r['se']:+.2f} | {hits} | {draws} | {own} | {r['em']:.3f} "
            f"({int(r['trajectories'])}) |"
        )
    lines += ["", "| engine | seeds | tokens | log p + H ± SE | z | EM (rollouts) |"]
    lines.append("|---|---|---:|---:|---:|---:|")
    for engine in dict.fromkeys(label[0] for label in labels):
        picked = [i for i, label in enumerate(labels) if label[0] == engine]
        rows = [results[i] for i in picked]
        mean, se, n, em = pooled(rows)
        seeds = ",".join(str(labels[i][1]) for i in picked)
        trajectories = int(sum(r["trajectories"] for r in rows))
        lines.append(
            f"| {engine} | {seeds} | {n} | {mean:+.4f} ± {se:.4f} | {mean / se:+.2f} "
            f"| {em:.3f} ({trajectories}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="policy folder (e.g. an SFT warm start)")
    parser.add_argument("--world", required=True)
    parser.add_argument("--out", default="runs/sampler_check")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--archive", help="copy the per-run JSON files and the table here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out)
    if args.one:
        engine, seed = args.one.rsplit(":", 1)
        result = run_one(args, engine, int(seed))
        path = out / f"{engine}-{seed}.json"
        path.with_suffix(".tmp").write_text(json.dumps(result, indent=2))
        path.with_suffix(".tmp").replace(path)
        return
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(e, int(s)) for s in args.seeds.split(",") for e in args.engines.split(",")]
    began = time.perf_counter()
    results: list[Row] = []
    labels: list[tuple[str, int, str]] = []
    for i, (engine, seed) in enumerate(jobs):
        path = out / f"{engine}-{seed}.json"
        if not path.is_file():
            done = time.perf_counter() - began
            eta = f", ETA {done / i * (len(jobs) - i) / 60:.0f} min" if i else ""
            print(f"[{i + 1}/{len(jobs)}] {engine} seed {seed}{eta}", flush=True)
            command = [sys.executable, *sys.argv, "--one", f"{engine}:{seed}"]
            subprocess.run(command, check=True)
        record = json.loads(path.read_text())
        labels.append((engine, seed, record["dtype"]))
        results.append({k: v for k, v in record.items() if isinstance(v, (int, float))})
    text = table(results, labels)
    print(text)
    if args.archive:
        archive = Path(args.archive)
        archive.mkdir(parents=True, exist_ok=True)
        for engine, seed in jobs:
            name = f"{engine}-{seed}.json"
            (archive / name).write_text((out / name).read_text())
        (archive / "table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
