"""The arms of `benchmarks/learning.py`: each a label, the warm start it trains from and its
overrides of the recipe preset (`tiny_cpu_grpo`). Kept apart so the run and its summary
(`learning_summary.py`) read one definition."""

from __future__ import annotations

OLD = ("algo.loss_agg=seq-mean-token-mean", "reward.no_answer_score=0.0",
       "rollout.force_answer=false", "rollout.max_turns=4", "optim.lr=1e-5",
       "optim.warmup_ratio=0.0", "mini_batch_size=8")  # fmt: skip
ARMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # arm: (label, warm start, overrides of the recipe preset)
    "recipe": ("RL (recipe)", "sft", ()),
    "unmasked": ("RL, retrieved tokens in the loss", "sft", ("algo.mask_env=false",)),
    "weak": ("RL from the weak warm start", "sft_weak", ()),
    "old": ("RL as landed before", "sft", OLD),
    "no_drgrpo": ("recipe − Dr. GRPO", "sft", ("algo.loss_agg=seq-mean-token-mean",)),
    "no_answer_signal": ("recipe − answer signal", "sft",
                         ("rollout.force_answer=false", "reward.no_answer_score=0.0")),
    "big_steps": ("recipe − small steps", "sft",
                  ("optim.lr=1e-5", "optim.warmup_ratio=0.0", "mini_batch_size=8")),
    "ppo": ("recipe with PPO + critic", "sft",
            ("algo.advantage=gae", "algo.kl_in_reward=true", "algo.kl_coef=0.001",
             "algo.kl_estimator=k1", "optim.critic_lr=1e-5")),
}  # fmt: skip
WARM = {"sft": "SFT warm start", "sft_weak": "weak SFT warm start"}
