"""What a cut is worth: regenerate held-out transcripts from every step, then weigh the rewards
by each cut policy's distribution. The trimmer's skill (S_trim) measured off-line, on many
transcripts at once, where a training step measures it on the few it revised.

    python benchmarks/search_r2/trim_skill.py --run runs/sft --out runs/trim_skill --samples 4
    python benchmarks/search_r2/trim_skill.py --run runs/sft --model runs/r2/model --out \
        runs/trim_r2
    python benchmarks/search_r2/trim_skill.py --run runs/sft --rollouts \
        runs/gate/held_out_s1.jsonl ...

Reads the labelled own rollouts a `searchrl sft ... meta_rollouts=N` run kept (by default the
final model's, `meta_final_held_out.jsonl`: what RL from that warm start reads; the flawed ones
unless `--all`). The model reads each under the meta prompt on vLLM (π_h, as in training); each
transcript with T steps is cut before every step k = 1..T and regenerated `--samples` times at
the run's rollout settings (one seed per sample), so Ĝ_k(y) is the mean EM of regenerating y
from k. Every cut policy's expected reward is then Σ_k π(k | y) Ĝ_k(y), with no cut drawn:

| policy | π(k · y) |
|---|---|
| trimmer (drawn) | π_h(k · y), the cut training draws |
| trimmer (argmax) | its argmax, the cut evaluation takes |
| batch-average | π̄(k), the set's mean of π_h restricted to 1..T: S_trim's no-skill baseline |
| uniform | 1/T, the random-cut arm (`refiner.trimmer=random`) |
| first step | k = 1: a new rollout from scratch |
| oracle | the world oracle's earliest flawed step (flawed transcripts): a perfect trimmer |

S_trim = trimmer (drawn) − batch-average = mean_y Σ_k (π_h(k · y) − π̄(k)) Ĝ_k(y), the paper's
Σ_k Cov(π_h(k), G_k). The table gives each policy's mean and its paired difference from the
batch-average, the uniform cut and the first step (reject and resample: `refiner.trimmer=first`)
with a bootstrap 95 % interval that resamples questions (several rollouts of one question, as
from `--rollouts` of `refiner_gate.py`, are resampled together). Each sample's regenerations
are written to `--out` as they finish; a rerun reads them back and goes on.

A third table asks why a cut can lose to a new rollout: for each flawed transcript, cut at the
oracle's step and at step 1, how often the regenerated step repeats the original's action
(the same query or the same answer, case and spacing aside) and the EM of the regenerations
that repeat it against those that do not. A fourth compares cuts one or two steps before and
after the oracle's with a new rollout on the same transcripts. `--fresh-tries N` regenerates as
`refiner.fresh_tries=N` does (a repeat is drawn again, up to N times; files named `_freshN`),
`--regen-temperature T` as `refiner.regen_temperature=T` does (files named `_tT`).
`--trimmer checked` weighs the same regenerations by the checked trimmer's cut
(`refiner.trimmer=checked`: the earliest step a check shows wrong, else π_h), so its S_trim is
read against its own batch-average cut (table named `_checked`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from itertools import product
from pathlib import Path

import numpy as np
import torch

from read_precision import labelled
from searchrl.config.loading import load_config
from searchrl.config.model import ModelConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.config.sft import SFTConfig
from searchrl.config.train import PolicyConfig
from searchrl.eval.stats import cluster_mean_ci
from searchrl.refiner.meta import Reading, average_cut
from searchrl.refiner.refiner import MetaRefiner
from searchrl.refiner.steps import step_action
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.retrieval.corpus import read_corpus
from searchrl.rollout.sampler import row_seed
from searchrl.train.environment import load_policy
from searchrl.types import Trajectory
from searchrl.utils.progress import LineProgress

ENGINE_CONTEXT = 4096
"""Tokens of context the engine takes (meta prompts and regenerations both fit)."""
CHUNK = 32
"""Regenerations per batched rollout call (the progress line advances per chunk)."""
Policy = Callable[[Reading, int, list[float]], list[float]]


def policies() -> dict[str, Policy]:
    """Cut policy → π(k | y) for k = 1..T from (reading, oracle label, batch-average π̄)."""

    def argmax(reading: Reading, _: int, __: list[float]) -> list[float]:
        return one_hot(reading.cut(None), reading.steps)

    def average(reading: Reading, _: int, mean: list[float]) -> list[float]:
        head = mean[: reading.steps]
        return [p / sum(head) for p in head]

    return {
        "trimmer (drawn)": lambda reading, _, __: reading.trimmer(),
        "trimmer (argmax)": argmax,
        "batch-average": average,
        "uniform": lambda reading, _, __: [1.0 / reading.steps] * reading.steps,
        "first step": lambda reading, _, __: one_hot(1, reading.steps),
        "oracle": lambda reading, label, __: one_hot(label, reading.steps) if label else [],
    }


def one_hot(k: int, steps: int) -> list[float]:
    """π with all mass on step k of 1..steps."""
    return [1.0 if j == k else 0.0 for j in range(1, steps + 1)]


def regenerate(
    refiner: MetaRefiner, jobs: list[tuple[Trajectory, int]], seed: int, done: Callable[[int], None]
) -> tuple[list[float], list[str]]:
    """EM of each (transcript, k) regenerated from step k with `seed`, in chunks, and the
    action the regeneration took at step k."""
    ems: list[float] = []
    actions: list[str] = []
    for start in range(0, len(jobs), CHUNK):
        chunk = jobs[start : start + CHUNK]
        out = refiner.regenerate_cuts([t for t, _ in chunk], [k for _, k in chunk], seed)
        ems += [float(t.metrics.get("em", 0.0)) for t in out]
        actions += [step_action(t, k) for t, (_, k) in zip(out, chunk, strict=True)]
        done(len(chunk))
    return ems, actions


def table(
    readings: list[Reading],
    labels: list[int],
    gains: list[list[float]],
    questions: list[str] | None = None,
) -> list[str]:
    """One row per policy: mean expected EM, and paired differences with intervals that
    resample `questions` (each transcript's question uid; default: each its own) whole."""
    questions = questions or [str(i) for i in range(len(readings))]
    mean = average_cut([r.trimmer() for r in readings])
    value: dict[str, list[float | None]] = {}
    for name, policy in policies().items():
        value[name] = []
        for reading, label, g in zip(readings, labels, gains, strict=True):
            pi = policy(reading, label, mean)
            value[name].append(sum(p * x for p, x in zip(pi, g, strict=True)) if pi else None)
    lines = [
        "| cut policy | transcripts | expected EM | − batch-average (95 %) | − uniform (95 %) "
        "| − first step (95 %) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, values in value.items():
        kept = [i for i, v in enumerate(values) if v is not None]
        if not kept:
            continue
        cells = [f"{np.mean([values[i] for i in kept]):.3f}"]
        for base in ("batch-average", "uniform", "first step"):
            diffs = [values[i] - value[base][i] for i in kept]  # type: ignore[operator]
            groups = [questions[i] for i in kept]
            est = cluster_mean_ci(diffs, groups, resamples=2000, confidence=0.95, seed=0)
            cells.append(f"{est.mean:+.3f} ({est.low:+.3f}, {est.high:+.3f})")
        lines.append(f"| {name} | {len(kept)} | " + " | ".join(cells) + " |")
    return lines


def kind_table(readings: list[Reading], labels: list[int], gains: list[list[float]]) -> list[str]:
    """Expected EM of the oracle's cut, a new rollout, the uniform cut and the trimmer's, for
    the flawed transcripts split by the oracle's kind of flaw: the last step (a wrong answer
    after sound searches, or none) against an earlier one (a search that missed its hop)."""
    named = policies()
    shown = ("oracle", "first step", "uniform", "trimmer (drawn)")
    lines = [
        "| flaw | transcripts | oracle's step | first step | uniform | trimmer (drawn) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, last in (("at the answer step", True), ("at a search step", False)):
        rows = [
            [sum(p * x for p, x in zip(named[n](r, y, []), g, strict=True)) for n in shown]
            for r, y, g in zip(readings, labels, gains, strict=True)
            if y > 0 and (y == r.steps) == last
        ]
        if rows:
            means = " | ".join(f"{m:.3f}" for m in np.mean(rows, axis=0))
            lines.append(f"| {kind} | {len(rows)} | {means} |")
    return lines


def offset_table(
    labels: list[int], gains: list[list[float]], questions: list[str], offsets: range
) -> list[str]:
    """Expected EM of a cut `d` steps from the oracle's (k = y + d, where 1 ≤ k ≤ T) against a
    new rollout on the same flawed transcripts: whether cutting before the named flaw, where
    the context that produced it is formed, repairs more than cutting at it."""
    lines = [
        "| cut at | transcripts | expected EM | first step, same transcripts "
        "| − first step (95 %) |",
        "|---|---:|---:|---:|---:|",
    ]
    for d in offsets:
        rows = [
            (g[y + d - 1], g[0], q)
            for y, g, q in zip(labels, gains, questions, strict=True)
            if y > 0 and 1 <= y + d <= len(g)
        ]
        if not rows:
            continue
        diffs = [cut - first for cut, first, _ in rows]
        est = cluster_mean_ci(diffs, [q for *_, q in rows], resamples=2000, confidence=0.95, seed=0)
        name = "oracle's step" + (f" {d:+d}" if d else "")
        lines.append(
            f"| {name} | {len(rows)} | {np.mean([c for c, _, _ in rows]):.3f} "
            f"| {np.mean([f for _, f, _ in rows]):.3f} "
            f"| {est.mean:+.3f} ({est.low:+.3f}, {est.high:+.3f}) |"
        )
    return lines


def repeat_table(rows: list[tuple[str, str, bool, float]]) -> list[str]:
    """Rows (cut, flaw kind, regeneration repeats the original's action, its EM) → per cut
    and kind: regenerations, share that repeat, EM of those that repeat and of the others."""
    lines = [
        "| cut | flaw | regenerations | repeat the original's action | EM if repeated "
        "| EM if not |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for cut, kind in product(("oracle's step", "first step"), ("answer step", "search step")):
        group = [(same, em) for c, k, same, em in rows if (c, k) == (cut, kind)]
        if not group:
            continue
        same = [em for repeated, em in group if repeated]
        other = [em for repeated, em in group if not repeated]
        cells = [f"{np.mean(ems):.3f}" if ems else "–" for ems in (same, other)]
        share = len(same) / len(group)
        lines.append(f"| {cut} | {kind} | {len(group)} | {share:.3f} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the `searchrl sft` run folder")
    parser.add_argument("--model", default="", help="the model that reads and regenerates "
                        "(default: the run's own `model`)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="where regenerations are kept")
    parser.add_argument("--set", default="meta_final_held_out", help="kept rollout file's name")
    parser.add_argument("--rollouts", type=Path, help="a labelled rollout file instead of --set "
                        "(e.g. refiner_gate.py's held_out_s0.jsonl), named by stem")  # fmt: skip
    parser.add_argument("--all", action="store_true", help="clean transcripts too")
    parser.add_argument("--samples", type=int, default=4, help="regenerations per (y, k)")
    parser.add_argument("--limit", type=int, default=0, help="transcripts (0: all)")
    parser.add_argument("--fresh-tries", type=int, default=0, help="refiner.fresh_tries: "
                        "redraw a regeneration that repeats the cut step's action")  # fmt: skip
    parser.add_argument(
        "--regen-temperature",
        type=float,
        default=0.0,
        help="refiner.regen_temperature: the continuations' temperature (0: the rollout's)",
    )
    parser.add_argument(
        "--trimmer",
        choices=("model", "checked"),
        default="model",
        help="refiner.trimmer whose cut the trimmer rows weigh (the regenerations are shared)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(SFTConfig, args.run / "config.yaml")
    if args.rollouts:
        args.set = args.rollouts.stem
    pairs = labelled(args.rollouts or args.run / "trajectories" / f"{args.set}.jsonl")
    pairs = [(t, y) for t, y in pairs if t.segments and (y > 0 or args.all)][: args.limit or None]
    model_dir = args.model or str(args.run / "model")
    module, tokenizer = load_policy(ModelConfig(name_or_path=model_dir), PolicyConfig())
    from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

    model_config = ModelConfig()
    dtype = engine_dtype(model_config, torch.device("cpu"))
    engine = VLLMBackend.from_module(
        module, tokenizer, model_config, dtype=dtype, max_model_len=ENGINE_CONTEXT
    )
    pad = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]
    world = Path(config.data.world_dir or args.run / "world")
    retriever = BM25Retriever.build(read_corpus(world / "corpus.jsonl"))
    refiner = MetaRefiner(
        module, tokenizer, engine, retriever, config.rollout,
        RefinerConfig(
            fresh_tries=args.fresh_tries,
            regen_temperature=args.regen_temperature,
            trimmer=args.trimmer,
        ),
        pad,
    )  # fmt: skip
    read = refiner.read([t for t, _ in pairs])
    kept = [(t, y, r) for (t, y), r in zip(pairs, read, strict=True) if r is not None]
    jobs = [(t, k) for t, _, r in kept for k in range(1, r.steps + 1)]
    args.out.mkdir(parents=True, exist_ok=True)
    progress = LineProgress("regenerations", len(jobs) * args.samples)
    totals = [0.0] * len(jobs)
    offsets = np.cumsum([0] + [r.steps for _, _, r in kept]).tolist()
    repeats: list[tuple[str, str, bool, float]] = []
    variant = f"_fresh{args.fresh_tries}" if args.fresh_tries else ""
    variant += f"_t{args.regen_temperature:g}" if args.regen_temperature else ""
    for sample in range(args.samples):
        path = args.out / f"{args.set}{variant}_s{sample}.json"
        said = path.with_name(f"{path.stem}_actions.json")
        if (
            path.is_file()
            and said.is_file()
            and len(ems := json.loads(path.read_text())) == len(jobs)
        ):
            actions = json.loads(said.read_text())
            progress.update(advance=len(jobs))
        else:
            seed = row_seed(args.seed, "trim-skill", sample) % (2**31)
            ems, actions = regenerate(refiner, jobs, seed, lambda n: progress.update(advance=n))
            path.write_text(json.dumps(ems))
            said.write_text(json.dumps(actions))
        totals = [a + b for a, b in zip(totals, ems, strict=True)]
        for (t, y, r), offset in zip(kept, offsets[:-1], strict=True):
            if y == 0:
                continue
            kind = "answer step" if y == r.steps else "search step"
            for cut, k in (("oracle's step", y), ("first step", 1)):
                job = offset + k - 1
                repeats.append((cut, kind, actions[job] == step_action(t, k), ems[job]))
    engine.close()
    means = iter(total / args.samples for total in totals)
    gains = [[next(means) for _ in range(r.steps)] for _, _, r in kept]
    flawed = sum(y > 0 for _, y, _ in kept)
    fired = sum(r.checked > 0 for _, _, r in kept)
    print(f"{args.set}: {len(kept)} transcripts ({flawed} flawed), {len(jobs)} cuts, "
          f"{args.samples} regenerations each, model {model_dir}, trimmer {args.trimmer}"
          + (f" (a check fired on {fired})" if args.trimmer == "checked" else ""))  # fmt: skip
    print(
        f"EM of the transcripts as generated: {np.mean([t.metrics['em'] for t, _, _ in kept]):.3f}"
    )
    uids = [t.uid for t, _, _ in kept]
    readings, labels = [r for _, _, r in kept], [y for _, y, _ in kept]
    lines = [*table(readings, labels, gains, uids), "", *kind_table(readings, labels, gains)]
    lines += ["", *repeat_table(repeats), "", *offset_table(labels, gains, uids, range(-2, 2))]
    print("\n".join(lines))
    named = variant + ("_checked" if args.trimmer == "checked" else "")
    (args.out / f"{args.set}{named}_table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
