"""What the Meta-Refiner adds to a training step at equal G, stage by stage (issue: ≤ +30 %).

    python benchmarks/search_r2/refiner_overhead.py --out runs/overhead --model runs/sft2/model \
        --world runs/sft2/world --steps 4 --margin -0.97

Runs `searchrl train --config tiny_cpu_search_r2` from one warm start, one arm after the other
on the same seed (so step 1 samples the same rollouts in every arm and, with the refiner on,
reads and revises the same ones): `off` (Search-R1: refiner and joint rows off), `joint`
(full Search-R2, every decision trained, the paper) and `joint@S` for each `--shares` S
(`refiner.joint_share=S`); with `--confidence` the two confidence arms of
`benchmarks/search_r2/search_r2.py` (`confidence`: the Actor's surprisal decides, π_h cuts, only the
cut trajectories are read; `conf_first`: it decides and cuts at step 1, nothing is read), at
`--threshold`; with `--module-read` each refiner arm again as `module:ARM`,
read by the trainer's module instead of the generation engine (`refiner.read_on_engine`).
Probes and dynamic sampling are off, so a step is generation,
the refiner (reading, then cutting and regenerating) and the update. `--margin` moves τ so a
warm start that rarely revises still revises a share like the paper's (the cost of
regenerating grows with it); the revision rate is in the table.

Prints per arm the mean seconds of the step and its stages, then the overhead against `off`
twice: over all steps (the arms' batches drift apart after step 1: lengths, revision
rates) and at step 1 alone (the same work in every arm). An arm whose metrics already hold
`--steps` rows is not run again, and one with a checkpoint is resumed (`--resume`), so a
killed benchmark goes on from its last finished step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

STAGES = {
    "step": "timing_s/step",
    "generation": "timing_s/gen",
    "read": "refiner/read_s",
    "refine": "timing_s/refine",
    "update": "timing_s/update_actor",
}


CONFIDENCE = {  # the Actor's confidence decides, no decision trained (the search_r2.py arms)
    "confidence": ("refiner.discriminator=confidence", "refiner.joint=false"),
    "conf_first": (
        "refiner.discriminator=confidence", "refiner.joint=false", "refiner.trimmer=first"
    ),
}  # fmt: skip


def arm_overrides(arm: str) -> list[str]:
    """`off`, `joint`, `joint@S`, and either refiner arm read by the trainer's module
    (`module:joint@S`) → the overrides that make the arm."""
    if arm.startswith("module:"):
        return ["refiner.read_on_engine=false", *arm_overrides(arm.removeprefix("module:"))]
    if arm == "off":
        return ["refiner.enabled=false", "refiner.joint=false"]
    if arm == "joint":
        return []
    if arm in CONFIDENCE:
        return list(CONFIDENCE[arm])
    share = float(arm.removeprefix("joint@"))
    return [f"refiner.joint_share={share}"]


def arm_folder(arm: str) -> str:
    """The arm's run folder under `--out`."""
    return arm.replace("@", "-").replace(":", "-")


def run_arm(args: argparse.Namespace, arm: str) -> Path:
    """Train the arm unless its metrics are complete; the arm's folder."""
    folder = args.out / arm_folder(arm)
    metrics = folder / "metrics.jsonl"
    if metrics.exists() and len(metrics.read_text().splitlines()) >= args.steps:
        print(f"{arm}: done before, kept", file=sys.stderr)
        return folder
    again = "--resume" if (folder / "checkpoints").is_dir() else "--force"
    command = [
        "searchrl", "train", "--config", "tiny_cpu_search_r2", "--out", str(folder), again,
        f"steps={args.steps}", f"policy.init_checkpoint={args.model}",
        f"data.world_dir={args.world}", f"batch_size={args.batch}", f"n_samples={args.group}",
        f"mini_batch_size={args.batch}", "data.eval_size=0", "algo.dynamic_sampling=false",
        "refiner.probe_share=0", "refiner.random_cut_probe=false", f"refiner.margin={args.margin}",
        f"refiner.confidence_threshold={args.threshold}", *args.set, *arm_overrides(arm),
    ]  # fmt: skip
    print(f"{arm}: {' '.join(command)}", file=sys.stderr)
    subprocess.run(command, check=True)
    return folder


def stage_seconds(row: dict[str, float]) -> dict[str, float]:
    """One metrics row → seconds per stage; `regenerate` = refine − read."""
    out = {name: float(row.get(key, 0.0)) for name, key in STAGES.items()}
    out["regenerate"] = out.pop("refine") - out["read"]
    return out


def table(out: Path, arms: list[str]) -> str:
    """The markdown table of the arms found under `out`."""
    rows: dict[str, list[dict[str, float]]] = {}
    for arm in arms:
        path = out / arm_folder(arm) / "metrics.jsonl"
        if path.exists():
            rows[arm] = [json.loads(line) for line in path.read_text().splitlines()]
    if "off" not in rows:
        return "no `off` arm yet"
    names = ["step", "generation", "read", "regenerate", "update"]
    lines = [
        "| arm | steps | " + " | ".join(f"{n} s" for n in names)
        + " | revised | meta rows trained | overhead (all steps) | overhead (step 1) |",
        "|---|---:|" + "---:|" * (len(names) + 4),
    ]  # fmt: skip
    base = sum(r["timing_s/step"] for r in rows["off"]) / len(rows["off"])
    base_first = rows["off"][0]["timing_s/step"]
    for arm, arm_rows in rows.items():
        stages = [stage_seconds(r) for r in arm_rows]
        means = {n: sum(s[n] for s in stages) / len(stages) for n in names}
        revised = ", ".join(f"{r.get('refiner/revision_rate', 0):.2f}" for r in arm_rows)
        trained = arm_rows[0].get("refiner/meta_rows_trained", 0)
        over_all = means["step"] / base - 1
        over_first = arm_rows[0]["timing_s/step"] / base_first - 1
        cells = " | ".join(f"{means[n]:.1f}" for n in names)
        lines.append(
            f"| {arm} | {len(arm_rows)} | {cells} | {revised if arm != 'off' else '–'} "
            f"| {trained:.0f} | {over_all:+.0%} | {over_first:+.0%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/overhead"))
    parser.add_argument("--model", type=Path, help="the warm start (searchrl sft's model/)")
    parser.add_argument("--world", type=Path, help="its world (searchrl sft's world/)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="G")
    parser.add_argument("--margin", type=float, default=0.0, help="τ")
    parser.add_argument("--shares", type=float, nargs="*", default=[0.25])
    parser.add_argument(
        "--confidence",
        action="store_true",
        help="also run the confidence arms (`confidence`, `conf_first`)",
    )
    parser.add_argument("--threshold", type=float, default=0.024,
                        help="refiner.confidence_threshold of the confidence arms (the warm "
                        "start's meta/final/confidence/threshold_for_flawed_share)")  # fmt: skip
    parser.add_argument("--module-read", action="store_true",
                        help="also run each refiner arm read by the trainer's module, not the "
                        "engine (`refiner.read_on_engine=false`)")  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra override for every arm")  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only print the table")
    args = parser.parse_args()
    refined = ["joint", *(f"joint@{s:g}" for s in args.shares)]
    arms = ["off", *refined, *(f"module:{arm}" for arm in refined if args.module_read)]
    arms += list(CONFIDENCE) if args.confidence else []
    if not args.summarize:
        if args.model is None or args.world is None:
            parser.error("--model and --world are needed to run the arms")
        for arm in arms:
            run_arm(args, arm)
    print(table(args.out, arms))


if __name__ == "__main__":
    main()
