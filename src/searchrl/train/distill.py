"""Self-distillation between RL phases (`distill.every`): a short SFT pass on the policy's own
correct trajectories of multi-hop questions, sampled by the RL steps since the last pass.

Why: at lr 3e-6 a GRPO step moves the policy a little toward its successful samples, and a
multi-hop success is rare in a group; an SFT pass imitates each such success at full strength
(rejection-sampling fine-tuning on the policy's own distribution, so nothing off-policy is
taught). The trajectories are read back from `trajectories/step_N.jsonl`, so a resumed run
distils exactly what the uninterrupted one did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch import nn

from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig
from searchrl.reward.format import is_valid_sequence
from searchrl.train.sft import run_sft
from searchrl.types import Trajectory


def own_successes(
    trajectories: Sequence[Trajectory], hops: Mapping[str, int | None], min_hops: int
) -> list[Trajectory]:
    """One trajectory per question (the first in sampling order) that answered right (reward
    EM 1), in the valid format (no invalid action, no forced answer), on a question of at
    least `min_hops` hops."""
    picked: dict[str, Trajectory] = {}
    for traj in trajectories:
        uid = traj.uid or traj.question
        if uid in picked or (hops.get(uid) or 0) < min_hops:
            continue
        right = traj.reward.get("em", traj.reward.get("score", 0.0)) >= 1.0
        text = "".join(s.text for s in traj.segments)
        if right and traj.stats.invalid_actions == 0 and is_valid_sequence(text):
            picked[uid] = traj
    return list(picked.values())


def read_step(folder: Path, step: int) -> list[Trajectory]:
    """The trajectories `train` saved for one step."""
    path = folder / f"step_{step}.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [Trajectory.from_json(json.loads(line)) for line in lines if line.strip()]


def distill(
    policy: nn.Module,
    config: TrainConfig,
    folder: Path,
    step: int,
    hops: Mapping[str, int | None],
    pad_id: int,
    bf16: bool,
) -> dict[str, float]:
    """After RL step `step`: fine-tune `policy` in place on the own successes of the last
    `distill.every` steps; returns `distill/*` metrics (no pass without examples)."""
    window = range(step - config.distill.every + 1, step + 1)
    sampled = [t for s in window for t in read_step(folder, s)]
    examples = own_successes(sampled, hops, config.distill.min_hops)
    out = {"distill/examples": float(len(examples)), "distill/sampled": float(len(sampled))}
    if not examples:
        return out
    phase = SFTConfig(
        seed=config.seed * 7_919 + step,
        epochs=config.distill.epochs,
        batch_size=config.distill.batch_size,
        micro_batch_size=config.micro_batch_size,
        micro_batch_tokens=config.micro_batch_tokens,
        lr=config.distill.lr,
        warmup_ratio=0.0,
        grad_clip=config.optim.grad_clip,
        mask_env=config.algo.mask_env,
    )
    history = run_sft(policy, examples, pad_id, phase, bf16)
    out["distill/loss"] = history[-1]["sft/loss"]
    out["distill/steps"] = float(len(history))
    return out
