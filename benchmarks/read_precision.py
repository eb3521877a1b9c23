"""The Meta-Refiner's reading at fp32 and under bf16 autocast: how much faster, and whether it
reads the same.

    python benchmarks/read_precision.py --model runs/sft/model --run runs/sft --threads 2

Reads the labelled own rollouts a `searchrl sft ... meta_rollouts=N` run kept
(`trajectories/meta_held_out.jsonl`, and `meta_final_held_out.jsonl` when there) with the
model, once at fp32 and once under bf16 autocast, alternating which goes first per chunk so
that a noisy machine does not favour one. Prints, per set: seconds each way, the largest and
mean shift of the raw log-odds, how many τ = 0 decisions and argmax cuts agree, and ROC-AUC
and trimmer exact step each way. bf16 is only worth it where the CPU has native bf16
(`lscpu`: avx512_bf16 or amx_bf16); elsewhere it is emulated and slower.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from searchrl.config.model import ModelConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.train import PolicyConfig
from searchrl.models.precision import fast_bf16
from searchrl.refiner.labelled import roc_auc
from searchrl.refiner.meta import Reading
from searchrl.refiner.refiner import MetaRefiner
from searchrl.train.environment import load_policy
from searchrl.types import Trajectory

CHUNK = 10
"""Transcripts per timed chunk (the order of the two precisions alternates per chunk)."""


def labelled(path: Path) -> list[tuple[Trajectory, int]]:
    """A kept rollout file's trajectories with their oracle labels (`metrics.flaw_step`)."""
    rows = [json.loads(line) for line in path.open() if line.strip()]
    trajs = [Trajectory.from_json(row) for row in rows]
    return [(t, int(t.metrics["flaw_step"])) for t in trajs]


def read_both(
    model: torch.nn.Module, tokenizer: object, trajs: list[Trajectory]
) -> tuple[dict[bool, list[Reading | None]], dict[bool, float]]:
    """Readings and seconds at fp32 (False) and bf16 (True), chunk by chunk, alternating."""
    pad = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]
    refiners = {
        bf16: MetaRefiner(
            model, tokenizer, None, None, RolloutConfig(), RefinerConfig(), pad, bf16=bf16
        )  # type: ignore[arg-type]
        for bf16 in (False, True)
    }
    readings: dict[bool, list[Reading | None]] = {False: [], True: []}
    seconds = {False: 0.0, True: 0.0}
    for index, start in enumerate(range(0, len(trajs), CHUNK)):
        chunk = trajs[start : start + CHUNK]
        for bf16 in (False, True) if index % 2 == 0 else (True, False):
            began = time.perf_counter()
            readings[bf16] += refiners[bf16].read(chunk)
            seconds[bf16] += time.perf_counter() - began
        print(f"  {start + len(chunk)}/{len(trajs)} read", flush=True)
    return readings, seconds


def rows(name: str, pairs: list[tuple[Trajectory, int]], model: torch.nn.Module, tok: object):  # type: ignore[no-untyped-def]
    """One set's table rows."""
    readings, seconds = read_both(model, tok, [t for t, _ in pairs])
    kept = [
        (a, b, y)
        for a, b, (_, y) in zip(readings[False], readings[True], pairs, strict=True)
        if a is not None and b is not None
    ]
    shift = [abs(a.log_odds - b.log_odds) for a, b, _ in kept]
    positive = [y > 0 for _, _, y in kept]
    flawed = [(a, b, y) for a, b, y in kept if y > 0]

    def exact(pick: int) -> float:
        return sum(r[pick].cut(None) == y for *r, y in flawed) / max(len(flawed), 1)

    return [
        f"| {name} | {len(kept)} | {seconds[False]:.1f} | {seconds[True]:.1f} "
        f"| {seconds[False] / max(seconds[True], 1e-9):.2f}× | {max(shift):.3f} "
        f"| {sum(shift) / len(shift):.3f} "
        f"| {sum(a.revise(0.0) == b.revise(0.0) for a, b, _ in kept)}/{len(kept)} "
        f"| {sum(a.cut(None) == b.cut(None) for a, b, _ in flawed)}/{len(flawed)} "
        f"| {roc_auc([a.log_odds for a, _, _ in kept], positive):.3f} "
        f"/ {roc_auc([b.log_odds for _, b, _ in kept], positive):.3f} "
        f"| {exact(0):.3f} / {exact(1):.3f} |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the warm-started model folder")
    parser.add_argument("--run", type=Path, required=True, help="the `searchrl sft` run folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(ModelConfig(name_or_path=args.model), PolicyConfig())
    model.eval()
    print(f"native bf16 on this CPU: {fast_bf16(torch.device('cpu'))}")
    lines = [
        "| set | read | fp32 s | bf16 s | speed-up | largest log-odds shift | mean shift "
        "| same τ=0 decision | same cut (flawed) | ROC-AUC raw fp32 / bf16 "
        "| trimmer exact fp32 / bf16 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("meta_held_out", "meta_final_held_out"):
        path = args.run / "trajectories" / f"{name}.jsonl"
        if path.is_file():
            lines += rows(name, labelled(path), model, tokenizer)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
