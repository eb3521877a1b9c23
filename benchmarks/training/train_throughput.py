"""Training throughput, old code against new, on the same references and machine, in one run.

    nice -n 19 python benchmarks/training/train_throughput.py --out runs/bench_throughput --reps 3

Every arm is a fresh process that imports `searchrl` from its own source tree: `old` from the
git revision `--old` (extracted with `git archive`), the others from this checkout. Arms take
turns within each repetition (old, new, ablations, old, new, ...), so a slow spell of a busy
machine hits all of them alike; ratios are taken within a repetition. Each arm, with the
demo's settings of its own tree (`DemoConfig().sft` / `.rl`) unless the arm overrides them:

- SFT: `run_sft` for `--sft-steps` optimizer steps over the first solved references of the
  demo world (seed 0), each used once. tokens/s counts every token forwarded and
  back-propagated (prompt, policy and passages); in-loss tokens/s only the trained ones.
- GRPO update: the next 16 references as one step's trajectories (4 groups of 4, GRPO advantages
  from fixed pseudo-rewards), old log-probs (`batched_logprobs`), then one `optimize` pass of
  the policy surrogate over one mini-batch of all 16 rows in the trainer's seeded shuffle.

Results go to `<out>/results.jsonl` one line per (repetition, arm), so a killed run resumes
where it stopped. Wall-clock tokens/s is the headline; tokens per CPU-second is printed too
(steadier on a machine other processes keep busy; with 2 threads it counts both).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OLD_DEFAULT = "d9d7872"
"""The last commit before packed training (what had landed when this benchmark was written)."""

ARMS: dict[str, tuple[str, dict[str, object]]] = {
    "old": ("old", {}),
    "new": ("new", {}),
    "new-bf16": ("new", {"autocast": "bf16"}),  # bf16 autocast whatever the probe says
    "new-fp32": ("new", {"autocast": "fp32"}),
    "new-mb1": ("new", {"micro_batch_size": 1}),  # one sequence per forward: no packing gain
    "new-mb4": ("new", {"micro_batch_size": 4}),  # four sequences packed in one forward
    "new-mb8": ("new", {"micro_batch_size": 8}),  # an SFT step's whole batch in one forward
}
GROUPS, GROUP_SIZE = 4, 4


# ---- worker: runs inside one arm's process, importing that arm's searchrl --------------------


def _worker(args: argparse.Namespace) -> None:
    """Measure one arm and print one JSON line (the last line of stdout)."""
    import random
    from dataclasses import fields, replace

    import torch

    from searchrl.algo.losses import make_loss_weights
    from searchrl.config.model import ModelConfig
    from searchrl.config.train import PolicyConfig

    try:  # its own module since the demo settings moved out of config.train
        from searchrl.config.demo import DemoConfig
    except ImportError:  # the old tree
        from searchrl.config.train import DemoConfig  # type: ignore[attr-defined,no-redef]
    from searchrl.data.world.solver import load_references
    from searchrl.train.collate import collate
    from searchrl.train.environment import load_policy
    from searchrl.train.logprobs import batched_logprobs
    from searchrl.train.models import make_optimizer, trainable, use_bf16
    from searchrl.train.sft import reference_trajectory, run_sft, solved_references
    from searchrl.train.update import (
        Experience,
        UpdateSettings,
        minibatches,
        optimize,
        policy_micro_loss,
    )

    overrides = json.loads(args.overrides)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    demo = DemoConfig()
    sft_cfg = replace(
        demo.sft,
        epochs=1.0,
        micro_batch_size=int(overrides.get("micro_batch_size", demo.sft.micro_batch_size)),
    )
    # the old tree has no token cap: pass it only where the tree knows it
    rl_tokens = (
        {"micro_batch_tokens": demo.rl.micro_batch_tokens}
        if hasattr(demo.rl, "micro_batch_tokens")
        else {}
    )
    autocast = str(overrides.get("autocast", "auto"))
    policy, tokenizer = load_policy(ModelConfig(), PolicyConfig(autocast=autocast))  # type: ignore[arg-type]
    bf16 = use_bf16(autocast, policy)
    refs = solved_references(load_references(Path(args.world) / "references_train.jsonl"))
    random.Random(0).shuffle(refs)
    n_sft = args.sft_steps * sft_cfg.batch_size
    trajs = [reference_trajectory(r, tokenizer, True) for r in refs[: n_sft + GROUPS * GROUP_SIZE]]
    sft_trajs, rl_trajs = trajs[:n_sft], trajs[n_sft:]
    pad_id = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]

    def lengths(ts: list) -> tuple[int, int]:  # (all tokens, tokens in the loss)
        return sum(len(t.prompt_ids) + len(t.response_ids) for t in ts), sum(
            sum(t.loss_mask()) for t in ts
        )

    def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - wall, time.process_time() - cpu

    row: dict[str, object] = {"precision": "bf16 autocast" if bf16 else "fp32"}
    row["threads"] = torch.get_num_threads()
    sft_tokens, sft_loss_tokens = lengths(sft_trajs)
    wall, cpu = timed(lambda: run_sft(policy, sft_trajs, pad_id, sft_cfg, bf16))
    row.update(
        sft_tokens=sft_tokens, sft_loss_tokens=sft_loss_tokens, sft_wall_s=wall, sft_cpu_s=cpu
    )
    row["sft_micro_batch"] = sft_cfg.micro_batch_size

    rl = demo.rl
    micro = int(overrides.get("micro_batch_size", rl.micro_batch_size))
    batch = collate(rl_trajs, pad_id, include_meta=True)
    mask = batch.policy_mask.float()
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(GROUPS, GROUP_SIZE, generator=generator).round()
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
    advantages = adv.reshape(-1, 1) * mask
    holder: dict[str, torch.Tensor] = {}

    def old_logprobs() -> None:
        with torch.no_grad():
            holder["old"] = batched_logprobs(policy, batch, micro, 1.0, bf16, mask, **rl_tokens)

    policy.eval()
    lp_wall, lp_cpu = timed(old_logprobs)
    # the old tree's settings also say whether π_old is the live policy (always computed here)
    known = {f.name for f in fields(UpdateSettings)}
    settings = UpdateSettings(
        micro_batch_size=micro, grad_clip=1.0, bf16=bf16, temperature=1.0, clip_eps=0.2,
        kl_coef=0.0, entropy_coef=0.0, value_clip=0.5,
        **({"on_policy": False} if "on_policy" in known else {}),
    )  # fmt: skip
    exp = Experience(batch, mask, holder["old"], advantages)
    optimizer = make_optimizer(policy, 1e-5, 0.01)

    def update() -> None:
        weights = make_loss_weights("seq-mean-token-mean")
        loss = policy_micro_loss(policy, exp, settings, None)
        rows = minibatches(len(rl_trajs), 1, torch.Generator().manual_seed(0))  # as the trainer
        caps = {"lengths": batch.attention_mask.sum(1), **rl_tokens} if rl_tokens else {}
        # the old tree takes (weights, mask); since the refiner merge it takes weigh(rows)
        if "weigh" in inspect.signature(optimize).parameters:
            aggregation: tuple[object, ...] = (lambda picked: weights(mask[picked]),)
        else:
            aggregation = (weights, mask)
        optimize(
            trainable(policy), optimizer, rows, *aggregation, micro, 1.0, loss, "actor", **caps
        )

    policy.train()
    up_wall, up_cpu = timed(update)
    rl_tokens, rl_loss_tokens = lengths(rl_trajs)
    row.update(
        rl_tokens=rl_tokens, rl_loss_tokens=rl_loss_tokens, rl_micro_batch=micro,
        logprob_wall_s=lp_wall, logprob_cpu_s=lp_cpu, update_wall_s=up_wall, update_cpu_s=up_cpu,
        peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    )  # fmt: skip
    print(json.dumps(row))


# ---- driver ---------------------------------------------------------------------------------


def _old_tree(out: Path, revision: str) -> Path:
    """`src/` of `revision`, extracted once under `out`."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", revision],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    tree = out / f"old-{commit}"
    if not (tree / "src" / "searchrl").is_dir():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
    return tree / "src"


def _world(out: Path) -> Path:
    """The demo world, seed 0 (the references every arm trains on)."""
    world = out / "world"
    if not (world / "manifest.json").is_file():
        from searchrl.config.data import world_preset
        from searchrl.data.world import generate_world, write_world

        write_world(generate_world(world_preset("demo")), world)
    return world


def _run_arm(name: str, src: Path, args: argparse.Namespace, world: Path) -> dict[str, object]:
    _, overrides = ARMS[name]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(args.threads)}
    command = [sys.executable, __file__, "--worker", "--world", str(world),
               "--threads", str(args.threads), "--sft-steps", str(args.sft_steps),
               "--overrides", json.dumps(overrides)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: arm {name!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rate(row: dict, tokens: str, seconds: str) -> float:
    return float(row[tokens]) / float(row[seconds])


def _table(rows: list[dict], arms: list[str]) -> str:
    """Median tokens/s per arm over repetitions, and the median (min–max) of its ratio to `old`
    within each repetition."""
    measures = [
        ("SFT tokens/s", "sft_tokens", "sft_wall_s"),
        ("SFT in-loss tokens/s", "sft_loss_tokens", "sft_wall_s"),
        ("SFT tokens/CPU-s", "sft_tokens", "sft_cpu_s"),
        ("GRPO old log-probs tokens/s", "rl_tokens", "logprob_wall_s"),
        ("GRPO update tokens/s", "rl_tokens", "update_wall_s"),
        ("GRPO update tokens/CPU-s", "rl_tokens", "update_cpu_s"),
    ]
    by_rep: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_rep.setdefault(int(row["rep"]), {})[str(row["arm"])] = row
    lines = ["| measure | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for label, tokens, seconds in measures:
        cells = []
        for arm in arms:
            rates = [_rate(r[arm], tokens, seconds) for r in by_rep.values() if arm in r]
            ratios = [
                _rate(r[arm], tokens, seconds) / _rate(r["old"], tokens, seconds)
                for r in by_rep.values()
                if arm in r and "old" in r
            ]
            if not rates:
                cells.append("-")
                continue
            cell = f"{statistics.median(rates):.0f}"
            if ratios and arm != "old":
                low, high = min(ratios), max(ratios)
                cell += f" ({statistics.median(ratios):.2f}× [{low:.2f}, {high:.2f}])"
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for key in ("precision", "sft_micro_batch", "rl_micro_batch", "peak_rss_gb"):
        values = []
        for arm in arms:
            seen = [r[arm][key] for r in by_rep.values() if arm in r]
            values.append(f"{max(seen):.1f}" if key == "peak_rss_gb" and seen else
                          (str(seen[0]) if seen else "-"))  # fmt: skip
        lines.append(f"| {key} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_throughput"))
    parser.add_argument("--old", default=OLD_DEFAULT, help="git revision of the old code")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {list(ARMS)}")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=2, help="SFT optimizer steps per arm")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: choose)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--world", default="", help=argparse.SUPPRESS)
    parser.add_argument("--overrides", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"error: unknown arm(s) {unknown}; expected some of {list(ARMS)}")
    if args.threads <= 0:
        from searchrl.utils.threads import choose_threads

        args.threads = choose_threads().threads
    args.out.mkdir(parents=True, exist_ok=True)
    world = _world(args.out)
    trees = {"new": REPO / "src", "old": _old_tree(args.out, args.old)}
    results = args.out / "results.jsonl"
    rows = [json.loads(x) for x in results.read_text().splitlines()] if results.is_file() else []
    done = {(int(r["rep"]), str(r["arm"])) for r in rows}
    todo = [(rep, arm) for rep in range(args.reps) for arm in arms if (rep, arm) not in done]
    started = time.perf_counter()
    for i, (rep, arm) in enumerate(todo):
        row = {"rep": rep, "arm": arm, **_run_arm(arm, trees[ARMS[arm][0]], args, world)}
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
        elapsed = time.perf_counter() - started
        eta = elapsed / (i + 1) * (len(todo) - i - 1)
        print(f"[{i + 1}/{len(todo)}] rep {rep} {arm}: SFT "
              f"{_rate(row, 'sft_tokens', 'sft_wall_s'):.0f} tokens/s, update "
              f"{_rate(row, 'rl_tokens', 'update_wall_s'):.0f} tokens/s · "
              f"elapsed {elapsed / 60:.1f} min, ETA {eta / 60:.1f} min", flush=True)  # fmt: skip
    print(f"\nold = {args.old}; threads {args.threads}; {args.reps} repetitions; median over "
          "repetitions (ratio to old within a repetition: median [min, max])\n")  # fmt: skip
    print(_table([r for r in rows if r["arm"] in arms], arms))


if __name__ == "__main__":
    main()
