"""Seconds, tokens/s and peak memory per phase of a GRPO step, against the CPU's FLOP ceiling.

    python benchmarks/training/train_step.py --model runs/learning/sft/model --steps 2

Runs `searchrl train` with the tiny CPU preset for a few steps (no evaluation), then reads the
run's metrics and trajectories. Phases: rollout (`timing_s/gen`), log-probs (`timing_s/ref`:
old + reference forwards), update (`timing_s/update_actor`: forward + backward). The ceiling is
a measured fp32 matmul rate; training needs ≈ 6 × params FLOPs per token (2 for a forward).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from searchrl.config.loading import load_config
from searchrl.config.presets import presets_dir
from searchrl.config.train import TrainConfig
from searchrl.train.run import train

PRESET = presets_dir() / "tiny_cpu_grpo.yaml"


def matmul_gflops(threads: int, size: int = 1024, repeats: int = 8) -> float:
    """Sustained fp32 matmul rate with `threads` torch threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def token_counts(run: Path, step: int) -> tuple[int, int]:
    """(policy tokens generated, prompt + response tokens) of one step's trajectories."""
    generated = total = 0
    for line in (run / "trajectories" / f"step_{step}.jsonl").read_text().splitlines():
        traj = json.loads(line)
        segments = traj["segments"]
        generated += sum(len(s["token_ids"]) for s in segments if s["role"] == "policy")
        total += len(traj["prompt_ids"]) + sum(len(s["token_ids"]) for s in segments)
    return generated, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="policy.init_checkpoint (an SFT model)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_train_step"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    overrides = [f"steps={args.steps}", "data.eval_size=0", "logging.progress=false",
                 f"save_every={args.steps}", *args.overrides]  # fmt: skip
    if args.model:
        overrides.append(f"policy.init_checkpoint={args.model}")
    config = load_config(TrainConfig, PRESET, overrides)
    threads = config.policy.torch_threads or torch.get_num_threads()
    ceiling = matmul_gflops(threads)
    train(config, args.out)
    rows = [json.loads(x) for x in (args.out / "metrics.jsonl").read_text().splitlines()]
    params = sum(p.numel() for p in torch.load(
        sorted((args.out / "checkpoints").glob("step_*"))[-1] / "policy.pt").values())  # fmt: skip
    # old log-probs for all rows but the first mini-batch of a one-epoch update, + reference
    minibatches = max(config.batch_size // config.mini_batch_size, 1)
    fresh = 1 / minibatches if config.ppo_epochs == 1 and not config.algo.kl_in_reward else 0.0
    passes = (1 - fresh) + int(config.algo.kl_coef > 0)
    print(
        f"params {params / 1e6:.1f}M · torch threads {threads} · fp32 matmul {ceiling:.0f} GFLOP/s"
    )
    print("| step | phase | seconds | tokens | tokens/s | GFLOP/s | % of ceiling | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        generated, total = token_counts(args.out, int(row["step"]))
        phases = (("rollout", "gen", generated, 2), ("log-probs", "ref", int(total * passes), 2),
                  ("update", "update_actor", total * config.ppo_epochs, 6),
                  ("step", "step", total, 0))  # fmt: skip
        for label, key, tokens, flops_per_param in phases:
            seconds = row[f"timing_s/{key}"]
            rate = tokens / seconds
            gflops = flops_per_param * params * rate / 1e9
            share = f"{100 * gflops / ceiling:.0f}%" if flops_per_param else "-"
            peak = row.get(f"perf/peak_rss_gb/{key}", 0.0)
            print(f"| {int(row['step'])} | {label} | {seconds:.1f} | {tokens} | {rate:.0f} | "
                  f"{gflops:.1f} | {share} | {peak:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
