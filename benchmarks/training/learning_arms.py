"""The arms of `benchmarks/training/learning.py`: each a label, the warm start it trains from and
its overrides of the recipe preset (`tiny_cpu_grpo`). Kept apart so the run and its summary
(`learning_summary.py`) read one definition.

Every arm also gets `data.exclude_trained_by=<its warm start>` from the benchmark; an arm that
trains on the warm start's questions clears it (`''`)."""

from __future__ import annotations

ALL_QUESTIONS = ("data.exclude_trained_by=''", "data.train_hop_weights=[]")
"""The RL pool as before issue 56: every train question, uniform order."""

ISSUE_56 = ("batch_size=2", "n_samples=8", "mini_batch_size=2", "policy.train_layers=0",
            "model.generation_dtype=auto", "algo.loss_agg=seq-mean-token-sum-norm",
            "algo.max_sampling_rounds=1", "screen.samples=0", "optim.lr=5e-6",
            "optim.warmup_ratio=0.1", "steps=24")  # fmt: skip
"""The recipe issue 56 left (`old`): 2 questions × 8 samples a step in one sampling round, no
screening, every weight at lr 5e-6 with 10 % warm-up, the bf16 engine, token sums over a
constant; 24 steps. Its probe still runs, so its signal is measured like the new recipe's."""

PREVIOUS = ("batch_size=8", "n_samples=4", "mini_batch_size=4", "micro_batch_size=1",
            "micro_batch_tokens=0", "policy.train_layers=0", "model.generation_dtype=auto",
            "screen.samples=0", "algo.scale_by_std=true", "algo.max_sampling_rounds=2",
            "algo.loss_agg=seq-mean-token-sum-norm", "algo.behaviour_correction=auto",
            "optim.lr=3e-6", "optim.warmup_ratio=0.25", "reward.no_answer_score=-0.5",
            "steps=12", *ALL_QUESTIONS)  # fmt: skip
"""The recipe before issue 56 (docs/notes/training_log.md): 8 questions × 4 samples with up to two
dynamic-sampling rounds, GRPO's std scaling, two mini-batches, lr 3e-6, 12 steps."""

LORA = ("policy.lora_rank=32", "policy.lora_alpha=64", "optim.lr=2e-4")
"""LoRA of rank 32 on the recipe's top 10 layers at 10× its learning rate ("LoRA Without
Regret": LoRA matches full fine-tuning in RL at ~10× its lr)."""

ARMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # arm: (label, warm start, overrides of the recipe preset)
    "recipe": ("RL (recipe)", "sft", ()),
    "old": ("the recipe of issue 56 (2 × 8, lr 5e-6, bf16 engine)", "sft", ISSUE_56),
    "lora": ("recipe with LoRA r32 at lr 2e-4", "sft", LORA),
    "all_layers": ("recipe training every layer", "sft", ("policy.train_layers=0",)),
    "bf16_engine": ("recipe sampling from a bf16 engine copy", "sft",
                    ("model.generation_dtype=auto",)),
    "no_screen": ("recipe without screening", "sft", ("screen.samples=0",)),
    "g8": ("recipe with 8 questions × G = 8", "sft",
           ("batch_size=8", "n_samples=8", "mini_batch_size=8")),
    "token_sum": ("recipe with token sums over a constant (Dr. GRPO)", "sft",
                  ("algo.loss_agg=seq-mean-token-sum-norm",)),
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
    "previous": ("the recipe before issue 56 (12 steps)", "sft", PREVIOUS),
    "ppo": ("recipe's levers with PPO + critic", "sft",
            ("algo.advantage=gae", "algo.kl_in_reward=true", "algo.kl_coef=0.001",
             "algo.kl_estimator=k1", "optim.critic_lr=1e-5")),
}  # fmt: skip
WARM = {"sft": "SFT warm start", "sft_weak": "weak SFT warm start"}
