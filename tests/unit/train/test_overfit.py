"""The policy gradient can overfit: RL on a fixed handful of questions, revisited step after
step, must raise their success rate at temperature 1 far above where it starts. A trainer
that cannot do this much has a bug to find before any learning claim.

The policy is a tiny random Llama sampled for real (on-policy, temperature 1); a question is
solved when the first sampled token falls in its answer set (16 of 64 tokens, about 1 in 4 by
chance; even and odd questions have disjoint sets), so the policy must learn to answer the
prompts differently. Measured while writing it: 0.22 → 0.93 and 0.99 on two seeds at lr 1e-2;
at 3e-2 groups turned flat (entropy collapsed on some questions) and success stalled at
0.52-0.74, which is why the test also bounds the step size it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tests.unit.train.fakes import VOCAB, tiny_config, tiny_llama

from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import prepare_policy
from searchrl.types import Question, Trajectory

QUESTIONS = [Question(uid=f"q{i}", question=f"q{i}", golden_answers=("yes",)) for i in range(4)]


def answers(uid: str) -> range:
    """The sixteen first tokens that solve question `uid`."""
    start = 8 + 16 * (int(uid[1:]) % 2)
    return range(start, start + 16)


class Sampler:
    """Samples three tokens per trajectory from the policy itself (no KV cache: tiny)."""

    def __init__(self, policy: torch.nn.Module) -> None:
        self.policy = policy

    @torch.no_grad()
    def __call__(
        self, qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]:
        generator = torch.Generator().manual_seed(seed)
        out = []
        for q in qs:
            prompt = [1, 2 + int(q.uid[1:]), 3]
            ids = torch.tensor([prompt] * n_samples)  # [G, 3]
            for _ in range(3):
                logits = self.policy(input_ids=ids).logits[:, -1].float()  # [G, V]
                if greedy:
                    token = logits.argmax(-1, keepdim=True)
                else:
                    token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
                ids = torch.cat([ids, token], dim=1)
            for s in range(n_samples):
                t = Trajectory(id=f"{q.uid}#{s}", question=q.question, golden_answers=["yes"])
                t.uid, t.sample, t.prompt_ids = q.uid, s, prompt
                response = ids[s, 3:].tolist()
                t.append("policy", "", response)
                t.answer = "yes" if response[0] in answers(q.uid) else "no"
                out.append(t)
        return out


def success(sampler: Sampler, samples: int = 64) -> float:
    trajectories = sampler(QUESTIONS, n_samples=samples, seed=12345, greedy=False)
    return sum(t.answer == "yes" for t in trajectories) / len(trajectories)


def test_rl_overfits_a_fixed_set_of_questions() -> None:
    assert VOCAB >= 8 + 32
    config = tiny_config(
        steps=40, batch_size=4, n_samples=8, mini_batch_size=4, micro_batch_size=32,
        algo={"scale_by_std": False, "kl_coef": 0.0, "dynamic_sampling": True,
              "max_sampling_rounds": 1, "loss_agg": "seq-mean-token-mean"},
        optim={"lr": 1e-2, "warmup_ratio": 0.0},
    )  # fmt: skip
    policy = prepare_policy(tiny_llama(seed=3), config.policy)
    sampler = Sampler(policy)
    trainer = Trainer(config, policy, None, None, 0, sampler, em_reward, QUESTIONS)
    before = success(sampler)
    informative = 0
    for _ in range(config.steps):
        metrics, _ = trainer.step()
        informative += int(metrics["train/groups_informative"])
    after = success(sampler)
    assert before < 0.35
    assert after > 0.8, (before, after)
    assert metrics["signal/informative_total"] == informative > 0
    assert metrics["signal/moved"] > 0
