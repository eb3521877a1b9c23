"""The Meta-Refiner's reading two ways: fp32 against bf16 autocast (`--versus bf16`), or the
trainer's module against the vLLM engine (`--versus engine`): how much faster, and whether it
reads the same.

    python benchmarks/search_r2/read_precision.py --model runs/sft/model --run runs/sft --threads 2
    python benchmarks/search_r2/read_precision.py --model runs/sft/model --run runs/sft --versus \
        engine

Reads the labelled own rollouts a `searchrl sft ... meta_rollouts=N` run kept
(`trajectories/meta_held_out.jsonl`, and `meta_final_held_out.jsonl` when there) both ways,
alternating which goes first per chunk so that a noisy machine does not favour one. Prints,
per set: seconds each way, the largest and mean shift of the raw log-odds, how many τ = 0
decisions and argmax cuts agree, and ROC-AUC and trimmer exact step each way. bf16 is only
worth it where the CPU has native bf16 (`lscpu`: avx512_bf16 or amx_bf16); elsewhere it is
emulated and slower. `--versus engine` reads with the module as the trainer would (bf16
autocast where it is native) against an engine started on the same weights in the dtype
rollouts use (`model.generation_dtype: auto`), with the engine's threads bound as in training.
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
"""Transcripts per timed chunk (the order of the two readers alternates per chunk)."""
ENGINE_CONTEXT = 4096
"""Tokens of context the benchmark's engine takes (the longest kept meta prompt fits)."""


def labelled(path: Path) -> list[tuple[Trajectory, int]]:
    """A kept rollout file's trajectories with their oracle labels (`metrics.flaw_step`)."""
    rows = [json.loads(line) for line in path.open() if line.strip()]
    trajs = [Trajectory.from_json(row) for row in rows]
    return [(t, int(t.metrics["flaw_step"])) for t in trajs]


def readers(
    model: torch.nn.Module, tokenizer: object, versus: str
) -> tuple[tuple[str, str], list[MetaRefiner]]:
    """The two readers compared (names, refiners): the first is the baseline."""
    pad = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]

    def refiner(backend: object, bf16: bool, on_engine: bool) -> MetaRefiner:
        config = RefinerConfig(read_on_engine=on_engine)
        return MetaRefiner(model, tokenizer, backend, None, RolloutConfig(), config, pad, bf16=bf16)  # type: ignore[arg-type]

    if versus == "bf16":
        return ("fp32", "bf16"), [refiner(None, False, False), refiner(None, True, False)]
    from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

    device = torch.device("cpu")
    config = ModelConfig()
    dtype = engine_dtype(config, device)
    engine = VLLMBackend.from_module(
        model, tokenizer, config, dtype=dtype, max_model_len=ENGINE_CONTEXT
    )
    native = fast_bf16(device)
    module = "module bf16" if native else "module fp32"
    pair = [refiner(None, native, False), refiner(engine, native, True)]
    return (module, f"engine {dtype}"), pair


def read_both(
    pair: list[MetaRefiner], trajs: list[Trajectory]
) -> tuple[list[list[Reading | None]], list[float]]:
    """Readings and seconds of both readers, chunk by chunk, alternating which goes first."""
    readings: list[list[Reading | None]] = [[], []]
    seconds = [0.0, 0.0]
    for index, start in enumerate(range(0, len(trajs), CHUNK)):
        chunk = trajs[start : start + CHUNK]
        for side in (0, 1) if index % 2 == 0 else (1, 0):
            began = time.perf_counter()
            readings[side] += pair[side].read(chunk)
            seconds[side] += time.perf_counter() - began
        print(f"  {start + len(chunk)}/{len(trajs)} read", flush=True)
    return readings, seconds


def rows(name: str, pairs: list[tuple[Trajectory, int]], pair: list[MetaRefiner]) -> list[str]:
    """One set's table row."""
    readings, seconds = read_both(pair, [t for t, _ in pairs])
    kept = [
        (a, b, y)
        for a, b, (_, y) in zip(readings[0], readings[1], pairs, strict=True)
        if a is not None and b is not None
    ]
    shift = [abs(a.log_odds - b.log_odds) for a, b, _ in kept]
    positive = [y > 0 for _, _, y in kept]
    flawed = [(a, b, y) for a, b, y in kept if y > 0]

    def exact(pick: int) -> float:
        return sum(r[pick].cut(None) == y for *r, y in flawed) / max(len(flawed), 1)

    return [
        f"| {name} | {len(kept)} | {seconds[0]:.1f} | {seconds[1]:.1f} "
        f"| {seconds[0] / max(seconds[1], 1e-9):.2f}× | {max(shift):.3f} "
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
    parser.add_argument("--versus", choices=("bf16", "engine"), default="bf16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="transcripts per set (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(ModelConfig(name_or_path=args.model), PolicyConfig())
    model.eval()
    print(f"native bf16 on this CPU: {fast_bf16(torch.device('cpu'))}")
    (first, second), pair = readers(model, tokenizer, args.versus)
    lines = [
        f"| set | read | {first} s | {second} s | speed-up | largest log-odds shift "
        "| mean shift | same τ=0 decision | same cut (flawed) "
        f"| ROC-AUC raw {first} / {second} | trimmer exact {first} / {second} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("meta_held_out", "meta_final_held_out"):
        path = args.run / "trajectories" / f"{name}.jsonl"
        if path.is_file():
            kept = labelled(path)
            lines += rows(name, kept[: args.limit] if args.limit else kept, pair)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
