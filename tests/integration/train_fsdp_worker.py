"""One rank of the 2-process FSDP check (run by `accelerate launch`, see test_train_fsdp.py):
a GRPO step on a sharded tiny model, a sharded checkpoint, one more step; then a fresh trainer
resumes from the checkpoint and repeats that step. Whole weights are saved for the test."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.models.vllm_weights import engine_state
from searchrl.models.weights import weights_version, whole_tensor
from searchrl.reward.outcome import em_reward
from searchrl.train import checkpoint as ckpt
from searchrl.train.loop import Trainer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.train.ports import Distributed
from searchrl.train.run import seed_everything, setup_distributed


def whole(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: whole_tensor(v).detach().clone() for k, v in trainer.policy.state_dict().items()}


def make(dist: Distributed, seen: list[str]) -> Trainer:
    seed_everything(0)
    config = tiny_config(policy={"autocast": "fp32", "strategy": "fsdp"})
    policy = prepare_policy(tiny_llama(seed=0), config.policy)
    reference = frozen_reference(policy, lora=False)

    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        seen.extend(q.uid for q in qs)
        return scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)

    return Trainer(config, policy, None, reference, 0, rollout, em_reward, questions(), dist)


def main(out: Path) -> None:
    config = tiny_config(policy={"autocast": "fp32", "strategy": "fsdp"})
    dist = setup_distributed(config.policy)
    seen: list[str] = []
    trainer = make(dist, seen)
    local = next(iter(trainer.policy.parameters()))
    initial = whole(trainer)
    versions = [weights_version(trainer.policy), weights_version(trainer.policy)]
    trainer.step()
    versions.append(weights_version(trainer.policy))
    first_prompts = list(seen)
    after_one = whole(trainer)
    # the generation engine's sync gathers the shards (every rank calls it, as in a rollout)
    state = dict(engine_state(trainer.policy, torch.float32))
    synced = state["model.embed_tokens.weight"].clone()
    trainer.save(out / "checkpoints")
    trainer.step()
    after_two = whole(trainer)
    resumed = make(dist, [])
    resumed.restore(ckpt.latest_checkpoint(out / "checkpoints"))  # type: ignore[arg-type]
    restored = whole(resumed)
    resumed.step()
    torch.save(
        {
            "world": dist.world_size,
            "sharded": type(local).__name__ == "DTensor"
            and local.to_local().numel() < local.numel(),
            "seen": first_prompts,
            "versions": versions,
            "initial": initial,
            "synced_embeddings": synced,
            "after_one": after_one,
            "after_two": after_two,
            "restored": restored,
            "resumed_two": whole(resumed),
            "files": sorted(p.name for p in (out / "checkpoints").rglob("*") if p.is_file()),
        },
        out / f"rank{dist.rank}.pt",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
