"""Whole multi-turn rollouts per generation engine, vLLM on the CPU against the HF backend:
the same questions × samples of a world, from the same (SFT) model, one fresh process per
engine so each start is counted from nothing (imports, weights, engine, compilation).

Per engine: policy tokens generated; wall and CPU seconds of the start and of the rollout
(CPU = every process of the engine: vLLM runs a scheduler and a worker process besides the
caller); tokens/s with the start excluded and included, per wall second and per CPU second;
the share of prompt tokens vLLM served from its prefix cache (what multi-turn reuse saves);
EM. On a shared machine the wall rates move with the other jobs' load, the CPU rates much
less: compare engines within one run, on CPU seconds when the load was not steady.

Resumable: each engine's result is a JSON file under --out, kept and reused unless --force.

    nice -n 19 python benchmarks/rollout/rollout_vllm.py --world W --model S/model --out runs/rv \
        --questions 16 --samples 4 --engines hf,vllm,vllm-compiled
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ENGINES = {
    "hf": {"backend": "hf"},
    "vllm": {"backend": "vllm"},
    "vllm-separate": {"backend": "vllm", "vllm_process": "separate"},  # vLLM's own processes
    "vllm-reserve": {"backend": "vllm", "vllm_threads_bind": "auto"},  # one core kept free
    "vllm-all": {"backend": "vllm", "vllm_threads_bind": "all"},  # the worker on every core
    "vllm-b32": {"backend": "vllm", "vllm_block_size": 32},
    "vllm-compiled": {"backend": "vllm", "vllm_enforce_eager": False},
    "vllm-compiled-cold": {"backend": "vllm", "vllm_enforce_eager": False},  # empty compile cache
    "vllm-separate-compiled": {
        "backend": "vllm",
        "vllm_process": "separate",
        "vllm_enforce_eager": False,
    },
    "vllm-compiled-b32": {"backend": "vllm", "vllm_enforce_eager": False, "vllm_block_size": 32},
}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and every live descendant (vLLM's)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def run_one(args: argparse.Namespace, engine: str, started: float) -> dict[str, float]:
    """Start the engine, roll out, measure (runs in the child process)."""
    import torch

    from searchrl.config.model import ModelConfig
    from searchrl.config.rollout import RolloutConfig
    from searchrl.data.benchmarks import load_flashrag_jsonl
    from searchrl.models.loading import load_policy
    from searchrl.retrieval.bm25 import BM25Retriever
    from searchrl.retrieval.corpus import read_corpus
    from searchrl.rollout.loop import run_rollouts

    torch.set_num_threads(args.threads)
    if engine.endswith("-cold"):  # vLLM's compile cache starts empty (it lives under this root)
        import os
        import tempfile

        os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="vllm-cache-")
    setup_wall, setup_cpu = time.perf_counter(), cpu_seconds()
    world = Path(args.world)
    questions = load_flashrag_jsonl(world / f"{args.split}.jsonl", "world")[: args.questions]
    retriever = BM25Retriever.build(read_corpus(world / "corpus.jsonl"))
    rollout = RolloutConfig(
        max_turns=args.max_turns,
        max_response_tokens=args.max_response_tokens,
        max_obs_tokens=300,
        max_total_tokens=args.max_total_tokens,
        temperature=args.temperature,
    )
    config = replace(ModelConfig(name_or_path=args.model), **ENGINES[engine])
    setup_wall, setup_cpu = time.perf_counter() - setup_wall, cpu_seconds() - setup_cpu
    policy = load_policy(config, max_model_len=rollout.max_total_tokens)
    # the start: everything since the process began (imports, weights, engine) but the world
    start_wall = time.perf_counter() - started - setup_wall
    start_cpu = cpu_seconds() - setup_cpu
    wall0, cpu1 = time.perf_counter(), cpu_seconds()
    trajectories = run_rollouts(
        policy.backend, policy.tokenizer, retriever, questions, rollout,
        n_samples=args.samples, seed=args.seed,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu1
    tokens = sum(t.stats.policy_tokens for t in trajectories)
    backend = policy.backend
    prompt = getattr(backend, "prompt_tokens", 0)
    result = {
        "trajectories": len(trajectories),
        "policy_tokens": tokens,
        "turns": sum(t.stats.turns for t in trajectories) / len(trajectories),
        "searches": sum(t.stats.searches for t in trajectories) / len(trajectories),
        "em": sum(t.metrics.get("em", 0.0) for t in trajectories) / len(trajectories),
        "start_wall_s": start_wall,
        "start_cpu_s": start_cpu,
        "rollout_wall_s": wall,
        "rollout_cpu_s": cpu,
        "cached_share": getattr(backend, "cached_tokens", 0) / prompt if prompt else float("nan"),
    }
    close = getattr(backend, "close", None)
    if callable(close):
        close()
    return result


def table(results: dict[str, dict[str, float]], reference: str) -> str:
    head = (
        "| engine | tokens | start s (CPU s) | rollout s (CPU s) | tok/s | tok/CPU-s "
        "| tok/s incl. start | tok/CPU-s incl. start | vs ref (tok/s, excl./incl.) "
        "| cached prompt share | turns | EM |\n|---|" + "---:|" * 11
    )
    rows = [head]
    ref = results.get(reference)
    for name, r in results.items():
        rate = r["policy_tokens"] / r["rollout_wall_s"]
        cpu_rate = r["policy_tokens"] / r["rollout_cpu_s"]
        whole = r["policy_tokens"] / (r["rollout_wall_s"] + r["start_wall_s"])
        whole_cpu = r["policy_tokens"] / (r["rollout_cpu_s"] + r["start_cpu_s"])
        ratio = "-"
        if ref is not None:
            ref_rate = ref["policy_tokens"] / ref["rollout_wall_s"]
            ref_whole = ref["policy_tokens"] / (ref["rollout_wall_s"] + ref["start_wall_s"])
            ratio = f"{rate / ref_rate:.2f} / {whole / ref_whole:.2f}"
        rows.append(
            f"| {name} | {r['policy_tokens']} | {r['start_wall_s']:.0f} ({r['start_cpu_s']:.0f}) "
            f"| {r['rollout_wall_s']:.0f} ({r['rollout_cpu_s']:.0f}) | {rate:.1f} "
            f"| {cpu_rate:.1f} | {whole:.1f} | {whole_cpu:.1f} | {ratio} "
            f"| {r['cached_share']:.2f} | {r['turns']:.2f} | {r['em']:.2f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--reference", default="hf")
    parser.add_argument("--split", default="test")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-response-tokens", type=int, default=120)
    parser.add_argument("--max-total-tokens", type=int, default=2048)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out)
    if args.one:
        started = time.perf_counter()
        result = run_one(args, args.one, started)
        path = out / f"{args.one}.json"
        path.with_suffix(".tmp").write_text(json.dumps(result, indent=2))
        path.with_suffix(".tmp").replace(path)
        return
    out.mkdir(parents=True, exist_ok=True)
    engines = args.engines.split(",")
    results: dict[str, dict[str, float]] = {}
    for i, engine in enumerate(engines):
        path = out / f"{engine}.json"
        if args.force or not path.is_file():
            print(f"[{i + 1}/{len(engines)}] {engine} ...", flush=True)
            began = time.perf_counter()
            subprocess.run([sys.executable, *sys.argv, "--one", engine], check=True)
            print(f"[{i + 1}/{len(engines)}] {engine}: {time.perf_counter() - began:.0f} s")
        results[engine] = json.loads(path.read_text())
    print(table(results, args.reference))


if __name__ == "__main__":
    main()
