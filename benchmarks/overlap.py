"""GRPO steps of the tiny CPU preset with generation overlapped with training, against the
synchronous loop: steps/hour, seconds per stage, the trainer's wait for rollouts, staleness.

    nice -n 19 python benchmarks/overlap.py --model S/model --world W --out runs/overlap \
        --steps 4 model.backend=vllm policy.torch_threads=1

Each variant is one `searchrl train` run (no held-out evaluation) into `--out/<variant>`;
a run that already has its steps is read back instead of run again (resumable). Step 0 has
nothing planned ahead in either variant, so steps/hour is computed over steps 1..N-1 as well
as over all steps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from searchrl.config.loading import load_config
from searchrl.config.presets import presets_dir
from searchrl.config.train import TrainConfig
from searchrl.train.run import train

PRESET = presets_dir() / "tiny_cpu_grpo.yaml"
VARIANTS = {"sync": ["overlap.enabled=false"], "overlap": ["overlap.enabled=true"]}


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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="SFT model directory (init_checkpoint)")
    parser.add_argument("--world", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    results = {}
    for name, extra in VARIANTS.items():
        run = Path(args.out) / name
        if len(steps_of(run)) < args.steps:
            overrides = [
                f"steps={args.steps}", "data.eval_size=0", "algo.behaviour_correction=auto",
                f"policy.init_checkpoint={args.model}", f"data.world_dir={args.world}",
                "logging.tensorboard=false", "logging.save_trajectories=false", *extra,
                *args.overrides,
            ]  # fmt: skip
            config = load_config(TrainConfig, PRESET, overrides)
            print(f"{name}: {args.steps} steps …", flush=True)
            train(config, run)
        results[name] = summary(steps_of(run))
    keys = list(next(iter(results.values())))
    print("| variant | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.3g}" for k in keys) + " |")
    if {"sync", "overlap"} <= results.keys():
        ratio = results["overlap"]["steps_per_hour_after_first"] / max(
            results["sync"]["steps_per_hour_after_first"], 1e-9
        )
        print(f"overlap / sync, steps per hour after the first step: {ratio:.2f}x")


if __name__ == "__main__":
    main()
