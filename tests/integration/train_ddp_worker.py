"""One rank of the 2-process training check (run by `accelerate launch`, see
test_train_ddp.py): one GRPO step on a tiny model with scripted rollouts, then save what this
rank holds so the test can compare ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.train.run import exit_ranks, seed_everything, setup_distributed


def main(out: Path) -> None:
    dist = setup_distributed()
    seed_everything(0)
    config = tiny_config()
    policy = prepare_policy(tiny_llama(seed=dist.rank), config.policy)  # ranks start different
    reference = frozen_reference(policy, lora=False)
    seen: list[str] = []

    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        seen.extend(q.uid for q in qs)
        return scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)

    trainer = Trainer(config, policy, None, reference, 0, rollout, em_reward, questions(), dist)
    initial = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    trainer.step()
    state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    torch.save(
        {"initial": initial, "after": state, "seen": seen, "world": dist.world_size},
        out / f"rank{dist.rank}.pt",
    )
    exit_ranks()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
