"""Where two runs of one training command part ways, step by step.

    python benchmarks/training/run_diff.py runs/a/r2 runs/b/r2

Two runs of the same command on the same code, config and warm start should sample the same
trajectories: every draw is seeded per row. When their metrics differ, this says where the
difference starts, from the trajectories each step kept (`trajectories/step_*.jsonl`), matched
by question and sample. Per step:

- how many final trajectories have the same tokens, and how many meta prompts (the Actor's
  original sample as the refiner read it, before any revision) are the same text;
- whether the refiner scored identical prompts identically (log-odds equal where the prompts
  are: a difference here points at the scoring, none at the sampling);
- on tokens both runs sampled alike, how many carry a different log-probability, the largest
  difference, and the earliest place one differs (segment, token, row): generation numerics that
  moved under identical inputs, which at a low-margin token change what is sampled next.

The first step where the log-probabilities differ is where to look; the earliest segment and
token say whether it is the first generation call (precision, kernels, threads) or a later one
(the KV cache kept between turns, the batch a row shares).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from searchrl.rollout.io import read_trajectories
from searchrl.types import Trajectory


@dataclass
class StepDiff:
    """How one step's trajectories of two runs compare (see the module docstring)."""

    rows: int
    same_tokens: int
    same_prompts: int
    rescored: int  # identical meta prompts whose log-odds differ
    tokens: int
    moved: int  # of `tokens`, those whose log-probability differs
    max_delta: float
    first: tuple[int, int, str] | None  # (segment, token, row) of the earliest moved one


def _key(trajectory: Trajectory) -> tuple[str, int]:
    return trajectory.id, trajectory.sample


def _prompts(trajectory: Trajectory) -> list[str]:
    refinement = trajectory.refinement
    return [d.prompt for d in refinement.decisions] if refinement else []


def compare(a: list[Trajectory], b: list[Trajectory]) -> StepDiff:
    """Compare the trajectories two runs kept at one step, matched by (question, sample)."""
    theirs = {_key(t): t for t in b}
    pairs = [(t, theirs[_key(t)]) for t in a if _key(t) in theirs]
    diff = StepDiff(len(pairs), 0, 0, 0, 0, 0, 0.0, None)
    for mine, other in pairs:
        same = [s.token_ids for s in mine.segments] == [s.token_ids for s in other.segments]
        diff.same_tokens += same
        if _prompts(mine) == _prompts(other):
            diff.same_prompts += 1
            if mine.refinement and other.refinement:
                diff.rescored += mine.refinement.log_odds != other.refinement.log_odds
        for index, (x, y) in enumerate(zip(mine.segments, other.segments, strict=False)):
            if x.token_ids != y.token_ids or not x.logprobs or not y.logprobs:
                continue
            for token, (p, q) in enumerate(zip(x.logprobs, y.logprobs, strict=False)):
                diff.tokens += 1
                if p == q:
                    continue
                where = (index, token, mine.id)
                diff.first = where if diff.first is None else min(diff.first, where)
                diff.moved += 1
                diff.max_delta = max(diff.max_delta, abs(p - q))
    return diff


def steps(run: Path) -> dict[int, Path]:
    """A training run's trajectory files by step (evaluations excluded)."""
    files = (run / "trajectories").glob("step_*.jsonl")
    numbered = {f.stem.removeprefix("step_"): f for f in files}
    return {int(step): f for step, f in numbered.items() if step.isdigit()}


def table(a: Path, b: Path) -> Table:
    """One row per step both runs reached."""
    mine, theirs = steps(a), steps(b)
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        raise SystemExit(f"{a} and {b} share no step with trajectories (trajectories/step_*.jsonl)")
    out = Table(title=f"{a} against {b}")
    heads = ("step", "rows", "same tokens", "same meta prompts", "rescored", "tokens",
             "log-prob moved", "max |Δ|", "first moved at")  # fmt: skip
    for head in heads:
        out.add_column(head, justify="left" if head == "first moved at" else "right")
    for step in shared:
        d = compare(read_trajectories(mine[step]), read_trajectories(theirs[step]))
        first = "–" if d.first is None else "segment {}, token {} ({})".format(*d.first)
        cells = (step, d.rows, d.same_tokens, d.same_prompts, d.rescored, d.tokens, d.moved)
        out.add_row(*map(str, cells), f"{d.max_delta:.4f}", first)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="a training run's folder")
    parser.add_argument("b", type=Path, help="another run of the same command")
    args = parser.parse_args()
    for run in (args.a, args.b):
        if not (run / "trajectories").is_dir():
            raise SystemExit(f"{run}: no trajectories/ folder (not a training run)")
    Console(width=160).print(table(args.a, args.b))


if __name__ == "__main__":
    main()
