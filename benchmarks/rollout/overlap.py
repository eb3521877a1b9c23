"""GRPO steps of the tiny CPU preset, end to end, at equal batch: the HF engine, vLLM
synchronous, and vLLM with generation overlapped with training: steps/hour, seconds per stage,
the trainer's wait for rollouts, staleness, the whole run's wall time (engine start included).

    python benchmarks/rollout/overlap.py --model S/model --world W --out runs/overlap --steps 4 \
        --variants hf,sync,overlap

Each variant is one `searchrl train` run (no held-out evaluation) into `--out/<variant>`, in
a process of its own; a run that already has its steps is read back instead of run again
(resumable). Step 1 has nothing planned ahead in either vLLM variant, so steps/hour is
computed over steps 2..N as well as over all steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from searchrl.config.loading import load_config
from searchrl.config.presets import presets_dir
from searchrl.config.train import TrainConfig
from searchrl.train.run import train

PRESET = presets_dir() / "tiny_cpu_grpo.yaml"
VARIANTS = {
    "hf": ["model.backend=hf", "overlap.enabled=false"],
    "sync": ["model.backend=vllm", "overlap.enabled=false"],
    "overlap": ["model.backend=vllm", "overlap.enabled=true"],
    # the engine in the trainer's process, generating in a thread while the trainer updates
    "overlap-here": ["model.backend=vllm", "overlap.enabled=true", "model.vllm_process=same"],
}


def steps_of(run: Path) -> list[dict[str, float]]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("step", 0) > 0 and "timing_s/step" in r]


def summary(rows: list[dict[str, float]]) -> dict[str, float]:
    def mean(key: str, part: list[dict[str, float]]) -> float:
        values = [r.get(key, 0.0) for r in part]
        return sum(values) / max(len(values), 1)

    later = rows[1:] or rows
    return {
        "steps": len(rows),
        "steps_per_hour": 3600 / mean("timing_s/step", rows),
        "steps_per_hour_after_first": 3600 / mean("timing_s/step", later),
        "step_s": mean("timing_s/step", later),
        "gen_s": mean("timing_s/gen", later),
        "update_s": mean("timing_s/update_actor", later),
        "sync_s": mean("timing_s/weight_sync", later),
        "staleness": mean("overlap/staleness", later),
        "tis_capped": mean("behaviour/capped_share", later),
        "wall_s": _wall(rows),
    }


def _wall(rows: list[dict[str, float]]) -> float:
    """The run's wall time from start to its last step (`wall_s` of the run's own record)."""
    return rows[-1].get("wall_s", float("nan")) if rows else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="SFT model directory (init_checkpoint)")
    parser.add_argument("--world", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--variants", default="hf,sync,overlap")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.one:
        run_variant(args, args.one)
        return
    results = {}
    for name in args.variants.split(","):
        run = Path(args.out) / name
        if len(steps_of(run)) < args.steps:
            print(f"{name}: {args.steps} steps …", flush=True)
            command = [sys.executable, *sys.argv, "--one", name]
            subprocess.run(command, check=True)
        results[name] = summary(steps_of(run))
    keys = list(next(iter(results.values())))
    print("| variant | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.3g}" for k in keys) + " |")
    for a, b in (("sync", "hf"), ("overlap", "sync")):
        if {a, b} <= results.keys():
            ratio = results[a]["steps_per_hour_after_first"] / max(
                results[b]["steps_per_hour_after_first"], 1e-9
            )
            whole = results[b]["wall_s"] / max(results[a]["wall_s"], 1e-9)
            print(
                f"{a} / {b}: steps/hour after the first step {ratio:.2f}x, whole run {whole:.2f}x"
            )


def run_variant(args: argparse.Namespace, name: str) -> None:
    """One variant's training run (in its own process), its wall time appended to its log."""
    started = time.perf_counter()
    run = Path(args.out) / name
    overrides = [
        f"steps={args.steps}", "data.eval_size=0", "algo.behaviour_correction=auto",
        f"policy.init_checkpoint={args.model}", f"data.world_dir={args.world}",
        "logging.tensorboard=false", "logging.save_trajectories=false",
        "logging.progress=false", *VARIANTS[name], *args.overrides,
    ]  # fmt: skip
    train(load_config(TrainConfig, PRESET, overrides), run)
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows[-1]["wall_s"] = time.perf_counter() - started
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
