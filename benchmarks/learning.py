"""Learning evidence: SFT warm start, then GRPO with and without retrieved-token masking.

    python benchmarks/learning.py --out runs/learning --steps 30
    python benchmarks/learning.py --out runs/learning --steps 30 --set batch_size=2 \
        --set mini_batch_size=2 --set algo.kl_coef=0      # ~2x cheaper steps
    python benchmarks/learning.py --out runs/learning --summarize   # table + PNG from what ran

Stages: generate a synthetic world (1-3 hops) → SFT warm start on its reference trajectories
(shared by both arms) → two GRPO runs started in parallel, one torch thread each (`masked`:
env tokens out of the loss; `unmasked`: the paper's ablation) → per-step train reward,
held-out EM (greedy, every `--eval-every` steps), valid searches, response length, wall time
→ `learning.png` and `summary.md` in the run folder. Partial runs are summarized as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ARMS = {"masked": "algo.mask_env=true", "unmasked": "algo.mask_env=false"}
HOPS = "[0.4, 0.4, 0.2, 0.0]"


def run(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a command with its output in `log` (one torch thread per process)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def searchrl(*args: str) -> list[str]:
    """The CLI of this interpreter's environment."""
    return [str(Path(sys.executable).parent / "searchrl"), *args]


def warm_start(out: Path, examples: int, seed: int) -> Path:
    """World + SFT on its reference trajectories, once (reused when already there)."""
    model = out / "sft" / "model"
    if (model / "config.json").is_file():
        return model
    world = [f"data.world.hop_weights={HOPS}", f"data.world.seed={seed}"]
    cmd = searchrl("sft", "--config", "tiny_cpu_sft", "--out", str(out / "sft"),
                   f"max_examples={examples}", "epochs=1.0", *world)  # fmt: skip
    if run(cmd, out / "sft.log").wait() != 0:
        raise SystemExit(f"SFT failed, see {out / 'sft.log'}")
    return model


def train_arms(
    out: Path, model: Path, steps: int, eval_every: int, eval_size: int, extra: list[str]
) -> None:
    """Both GRPO arms in parallel, on the SFT run's world, from the same warm start; `extra`
    are key=value overrides given to both."""
    procs = []
    for arm, switch in ARMS.items():
        cmd = searchrl(
            "train", "--config", "tiny_cpu_grpo", "--out", str(out / arm), "--resume",
            f"policy.init_checkpoint={model}", f"data.world_dir={out / 'sft' / 'world'}",
            f"steps={steps}", f"eval_every={eval_every}", f"data.eval_size={eval_size}",
            "save_every=1", "optim.lr=1.0e-5", "logging.progress=false", *extra, switch,
        )  # fmt: skip
        procs.append(run(cmd, out / f"{arm}.log"))
    for proc in procs:
        proc.wait()


def rows(path: Path) -> list[dict[str, float]]:
    """metrics.jsonl rows (empty when the arm has not written any yet)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def running_mean(values: list[float] | tuple[float, ...], window: int) -> list[float]:
    """Mean of each value and up to `window - 1` values before it."""
    out = []
    for i in range(len(values)):
        recent = values[max(0, i - window + 1) : i + 1]
        out.append(sum(recent) / len(recent))
    return out


def summarize(out: Path) -> str:
    """Markdown table per arm and a 4-panel PNG comparing the arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("critic/score/mean", "train reward (EM)"), ("val/em", "held-out EM (greedy)"),
              ("env/number_of_valid_search", "searches / trajectory"),
              ("response_length/mean", "response tokens"))  # fmt: skip
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    header = ("| arm | steps | held-out EM first → last | train reward first 5 → last 5 | "
              "searches/traj | response len | s/step |")  # fmt: skip
    lines = [header, "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        data = rows(out / arm / "metrics.jsonl")
        steps = [r for r in data if r["step"] > 0]
        evals = [(r["step"], r["val/em"]) for r in data if "val/em" in r]
        for ax, (key, title) in zip(axes, panels, strict=True):
            ax.set_title(title)
            ax.set_xlabel("GRPO step")
            ax.grid(alpha=0.3)
            pts = [(r["step"], r[key]) for r in data if key in r]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            if key == "val/em":
                ax.plot(xs, ys, marker="o", ms=4, label=arm)
                continue
            # 2 prompts a step make per-step values mostly about which questions came up (both
            # arms draw the same ones): raw points faint, a 5-step running mean on top
            line = ax.plot(xs, ys, marker="o", ms=2, alpha=0.3)[0]
            ax.plot(xs, running_mean(ys, 5), color=line.get_color(), lw=2, label=arm)
        if not steps:
            continue
        reward = [r["critic/score/mean"] for r in steps]
        head, tail = reward[:5], reward[-5:]
        em = f"{evals[0][1]:.3f} (step {evals[0][0]}) → {evals[-1][1]:.3f} (step {evals[-1][0]})"
        lines.append(
            f"| {arm} | {len(steps)} | {em} | {sum(head) / len(head):.3f} → "
            f"{sum(tail) / len(tail):.3f} | {steps[0]['env/number_of_valid_search']:.2f} → "
            f"{steps[-1]['env/number_of_valid_search']:.2f} | "
            f"{steps[0]['response_length/mean']:.0f} → {steps[-1]['response_length/mean']:.0f} | "
            f"{sum(r['timing_s/step'] for r in steps) / len(steps):.0f} |"
        )
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "learning.png", dpi=110)
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--sft-examples", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--eval-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="config override for both GRPO arms (repeatable), e.g. --set batch_size=2",
    )  # fmt: skip
    parser.add_argument("--summarize", action="store_true", help="only write table + PNG")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        model = warm_start(args.out, args.sft_examples, args.seed)
        train_arms(args.out, model, args.steps, args.eval_every, args.eval_size, args.set)
    print(summarize(args.out))


if __name__ == "__main__":
    main()
