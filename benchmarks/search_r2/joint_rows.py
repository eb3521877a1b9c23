"""What joint optimization's meta rows cost in a CPU update, next to the trajectories' own rows.

    python benchmarks/search_r2/joint_rows.py --threads 1

Builds Search-R1-shaped trajectory rows (prompt, then policy/passage turns) and Search-R2 meta
rows (the same transcript again under the meta prompt, then a 2-token decision) of random ids,
and times on the embedded SmolLM2-135M (fp32) the passes an update makes over them: the old and
the reference log-prob forwards, and the forward + backward of the loss. Under the engine
correction (vLLM) a meta row used to get all three; it now skips the old forward whenever it
is in the first mini-batch (`Trainer._experience`), and the table says what that saves.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from searchrl.config.model import ModelConfig
from searchrl.models.loading import load_model
from searchrl.train.collate import collate
from searchrl.train.logprobs import forward_logprobs, logprobs_of_rows
from searchrl.types import Trajectory


def rows(count: int, seed: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """`count` trajectories (220 prompt + 3 × (40 policy + 110 passage) + 30 answer tokens) and
    their meta rows (~850 prompt tokens + a 2-token decision)."""
    rng = random.Random(seed)

    def ids(n: int) -> list[int]:
        return [rng.randrange(100, 40_000) for _ in range(n)]

    trajectories, metas = [], []
    for i in range(count):
        t = Trajectory(id=f"t{i}", question="q", golden_answers=["a"], prompt_ids=ids(220))
        for _ in range(3):
            t.append("policy", "p", ids(40))
            t.append("env", "e", ids(110))
        t.append("policy", "p", ids(30))
        trajectories.append(t)
        meta = Trajectory(id=f"m{i}", question="q", golden_answers=["a"], prompt_ids=ids(850))
        meta.append("meta", "0", ids(2))
        metas.append(meta)
    return trajectories, metas


def seconds(
    model: torch.nn.Module, batch_rows: list[Trajectory], micro: int
) -> tuple[float, float]:
    """(one no-grad log-prob forward, forward + backward of the loss) over the rows."""
    batch = collate(batch_rows, 0, include_meta=True)
    mask = batch.policy_mask.float()
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        logprobs_of_rows(model, batch, list(range(len(batch_rows))), micro, 1.0, False, mask, 0)
    forward = time.perf_counter() - start
    model.train()
    start = time.perf_counter()
    for first in range(0, len(batch_rows), micro):
        mb = batch.select(list(range(first, min(first + micro, len(batch_rows)))))
        logp, _ = forward_logprobs(model, mb, 1.0, "log", mb.policy_mask.float())
        logp.sum().backward()
    model.zero_grad(set_to_none=True)
    return forward, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=8, help="trajectories (and meta rows)")
    parser.add_argument("--micro", type=int, default=4, help="micro-batch size")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many timings")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(ModelConfig()).model.float()
    trajectories, metas = rows(args.rows, seed=0)
    best = {}
    for name, group in (("trajectories", trajectories), ("meta rows", metas)):
        runs = [seconds(model, group, args.micro) for _ in range(args.repeats)]
        best[name] = (min(r[0] for r in runs), min(r[1] for r in runs))
    print(f"{args.rows} rows of each, {args.threads} thread(s), fp32\n")
    print("| rows | one log-prob forward s (old = reference) | forward + backward s | update s |")
    print("|---|---:|---:|---:|")
    for name, (fwd, fb) in best.items():
        print(f"| {name} | {fwd:.1f} | {fb:.1f} | {2 * fwd + fb:.1f} |")
    (tf, tb), (mf, mb) = best["trajectories"], best["meta rows"]
    off, before, after = 2 * tf + tb, 2 * tf + tb + 2 * mf + mb, 2 * tf + tb + mf + mb
    print(
        f"\nupdate with meta rows / without: {before / off:.2f}x before, {after / off:.2f}x "
        f"after skipping their old forward ({1 - after / before:.0%} of the joint update)"
    )


if __name__ == "__main__":
    main()
