"""Run folders as `searchrl train`, `sft` and `eval` write them, built by hand so the report
tests need no model: two seeds of one GRPO run, an SFT run, and two evaluations of the same
questions (one with a Search-R2 refinement record)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from searchrl.data.templates import format_information
from searchrl.eval.summary import summarize
from searchrl.types import Refinement, SearchCall, Trajectory

HOSTILE = "</script><script>window.__pwned = 1</script><img src=x onerror=alert(1)>"
"""Text a model could write; the page must show it, never run it."""

DOCS = {
    "d1": '"Paris"\nParis is the capital and largest city of France.',
    "d2": '"France"\nFrance is a country in Western Europe.',
    "d3": '"Lyon"\nLyon is a city in France.',
}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def trajectory(
    i: int, correct: bool, refined: bool = False, source: str = "nq", log_odds: float = 1.5
) -> Trajectory:
    traj = Trajectory(
        id=f"{source}:{i}#0",
        question=f"What is the capital of France ({i})?",
        golden_answers=["Paris"],
        prompt="<prompt>",
        uid=f"{source}:{i}",
    )
    answer = "Paris" if correct else "Lyon"
    traj.append(
        "policy", "<think>I should search.</think>\n<search> capital of France </search>", [1]
    )
    traj.append("env", format_information([DOCS["d1"], DOCS["d2"], DOCS["d3"]]), [2])
    if i == 0:
        traj.append("policy", f"<think>{HOSTILE}</think>", [3])
    traj.append("policy", f"<think>Found it.</think>\n<answer> {answer} </answer>", [4])
    traj.searches.append(SearchCall("capital of France", ["d1", "d2", "d3"], 1))
    traj.answer = answer
    traj.metrics = {"em": float(correct), "f1": float(correct), "subem": float(correct)}
    traj.stats.searches, traj.stats.turns, traj.stats.stop_reason = 1, 2, "answer"
    if refined:
        traj.refinement = Refinement(revised=True, cut_step=2, prefix_segments=2, log_odds=log_odds)
    return traj


def training_run(folder: Path, seed: int, rewards: list[float], world: Path) -> None:
    data = {"world_dir": str(world), "eval_split": "test"}
    config = {"seed": seed, "steps": len(rewards), "algo": {"advantage": "grpo"}, "data": data}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    rows: list[dict] = [{"step": 0, "val/em": 0.2 + 0.01 * seed}]
    for step, reward in enumerate(rewards, start=1):
        rows.append(
            {
                "step": step,
                "critic/score/mean": reward,
                "response_length/mean": 200.0 - 10 * step,
                "env/number_of_valid_search": 1.0 + 0.1 * step,
                "actor/kl_loss": 0.001 * step,
                "actor/entropy_loss": 1.5 - 0.1 * step,
                "probe/pass@1": 0.2 + 0.02 * step,
                "probe/pass@k": 0.4 + 0.03 * step,
                "signal/trained_total": 3.0 * step,
                "signal/moved": 0.1 * step,
                "signal/probe_kl": 0.002 * step,
            }
        )
    rows[-1]["val/em"] = 0.3 + 0.02 * seed
    _jsonl(folder / "metrics.jsonl", rows)
    # −inf: what the confidence discriminator records for a trajectory it could not score
    unscored = trajectory(1, False, True, source="world", log_odds=-math.inf)
    trajs = [trajectory(0, True, source="world"), unscored]
    before = [trajectory(0, False, source="world"), trajectory(1, False, source="world")]
    _jsonl(folder / "trajectories" / "eval_step_0.jsonl", [t.to_json() for t in before])
    _jsonl(
        folder / "trajectories" / f"eval_step_{len(rewards)}.jsonl", [t.to_json() for t in trajs]
    )


def evaluation(folder: Path, method: str, correct: list[bool]) -> None:
    rows = []
    for i, ok in enumerate(correct):
        traj = trajectory(i, ok, refined=(method == "search-r2" and i == 1))
        rows.append(
            {
                "id": f"nq:{i}",
                "set": "nq" if i % 2 else "hotpotqa",
                "method": method,
                "question": traj.question,
                "golden_answers": ["Paris"],
                "hops": 1 + i % 3,
                "prediction": traj.answer,
                "em": float(ok),
                "f1": float(ok),
                "subem": float(ok),
                "searches": 1,
                "turns": 2,
                "tokens": 30,
                "latency": 0.5,
                "stop_reason": "answer",
                "documents": DOCS,
                "trajectory": traj.to_json(),
            }
        )
    _jsonl(folder / "samples.jsonl", rows)
    summary = summarize(rows, 200, 0.95)
    summary.update(method=method, model="tiny", missing=0)
    (folder / "summary.json").write_text(json.dumps(summary))


def build(root: Path) -> Path:
    """`root/world/test.jsonl`, `root/runs/{grpo_s0,grpo_s1,sft}` (the GRPO runs evaluated on
    that world) and `root/evals/{search-r1,search-r2}`."""
    world = root / "world"
    _jsonl(
        world / "test.jsonl",
        [
            {"id": str(i), "question": f"q{i}", "golden_answers": ["Paris"], "hops": 2 + i}
            for i in range(2)
        ],
    )
    training_run(root / "runs" / "grpo_s0", 0, [0.2, 0.3, 0.4], world)
    training_run(root / "runs" / "grpo_s1", 1, [0.25, 0.35, 0.5], world)
    sft = root / "runs" / "sft"
    sft.mkdir(parents=True)
    (sft / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "source": "references"}))
    _jsonl(sft / "metrics.jsonl", [{"step": s, "sft/loss": 1.0 / s} for s in (1, 2, 3)])
    pattern = [True, False, True, True, False, True, False, True]
    evaluation(root / "evals" / "search-r1", "search-r1", pattern)
    evaluation(root / "evals" / "search-r2", "search-r2", [True] * 6 + [False, True])
    return root
