"""The arms of `benchmarks/training/learning.py`: each a label, the warm start it trains from and
its overrides of the recipe preset (`tiny_cpu_grpo`). Kept apart so the run and its summary
(`learning_summary.py`) read one definition.

Every arm also gets `data.exclude_trained_by=<its warm start>` from the benchmark; an arm that
trains on the warm start's questions clears it (`''`)."""

from __future__ import annotations

ALL_QUESTIONS = ("data.exclude_trained_by=''", "data.train_hop_weights=[]")
"""The RL pool as before issue 56: every train question, uniform order."""

PREVIOUS = ("batch_size=8", "n_samples=4", "mini_batch_size=4", "micro_batch_size=1",
            "micro_batch_tokens=0", "algo.scale_by_std=true", "algo.max_sampling_rounds=2",
            "algo.behaviour_correction=auto", "optim.lr=3e-6", "optim.warmup_ratio=0.25",
            "reward.no_answer_score=-0.5", "steps=12", *ALL_QUESTIONS)  # fmt: skip
"""The recipe before issue 56 (docs/notes/training_log.md): 8 questions × 4 samples with up to two
dynamic-sampling rounds, GRPO's std scaling, two mini-batches, lr 3e-6, 12 steps."""

ARMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # arm: (label, warm start, overrides of the recipe preset)
    "recipe": ("RL (recipe)", "sft", ()),
    "unmasked": ("RL, retrieved tokens in the loss", "sft", ("algo.mask_env=false",)),
    "weak": ("RL from the weak warm start", "sft_weak", ()),
    "distill": ("recipe + self-distillation at step 12", "sft",
                ("distill.every=12", "distill.min_hops=2")),
    "std_scaled": ("recipe with GRPO's std scaling", "sft", ("algo.scale_by_std=true",)),
    "all_questions": ("recipe on every train question, uniform", "sft", ALL_QUESTIONS),
    "temp07": ("recipe sampling at temperature 0.7", "sft", ("rollout.temperature=0.7",)),
    "no_answer_penalty": ("recipe scoring no answer −0.5", "sft", ("reward.no_answer_score=-0.5",)),
    "hard_first": ("recipe with 3-4-hop questions first", "sft",
                   ("data.train_hop_weights=[1,1,2,2]",)),
    "v1": ("first pilot: no answer −0.5, 3-4 hops first, TIS", "sft",
           ("reward.no_answer_score=-0.5", "data.train_hop_weights=[1,1,2,2]",
            "algo.behaviour_correction=auto")),
    "previous": ("the recipe before issue 56 (12 steps)", "sft", PREVIOUS),
    "ppo": ("recipe's levers with PPO + critic", "sft",
            ("algo.advantage=gae", "algo.kl_in_reward=true", "algo.kl_coef=0.001",
             "algo.kl_estimator=k1", "optim.critic_lr=1e-5")),
}  # fmt: skip
WARM = {"sft": "SFT warm start", "sft_weak": "weak SFT warm start"}
