"""The keys of Search-R1's training scripts (veRL's Hydra config) and what they are called
here, for people who arrive with a `train_ppo.sh` in hand. `config.reference` renders this
table into the docs; a `key=value` override that is a veRL key gets the name to use instead.

Every `ours` entry must be a key of `TrainConfig` (a test checks it), so the table cannot
name a setting that was renamed or removed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyMap:
    """One veRL / Search-R1 key and its counterpart here (None: nothing to set)."""

    theirs: str
    ours: str | None
    note: str = ""


A = "actor_rollout_ref"
KEYS = (
    KeyMap("data.train_batch_size", "batch_size", "prompts per step in both"),
    KeyMap(f"{A}.rollout.n", "n_samples", "trajectories per prompt (GRPO group size)"),
    KeyMap(f"{A}.rollout.n_agent", "n_samples", "Search-R1's name for rollout.n"),
    KeyMap(f"{A}.actor.ppo_mini_batch_size", "mini_batch_size", "prompts per update in both"),
    KeyMap(f"{A}.actor.ppo_micro_batch_size", "micro_batch_size",
           "here sequences per forward in each process, not summed over GPUs"),
    KeyMap(f"{A}.actor.ppo_epochs", "ppo_epochs"),
    KeyMap("trainer.total_training_steps", "steps"),
    KeyMap("trainer.total_epochs", None, "training is counted in steps only"),
    KeyMap("trainer.save_freq", "save_every"),
    KeyMap("trainer.test_freq", "eval_every", "0 = before and after training only"),
    KeyMap("trainer.val_before_train", None, "always on while data.eval_size > 0"),
    KeyMap("trainer.project_name", "logging.wandb_project"),
    KeyMap("trainer.logger", "logging.tensorboard", "wandb: set logging.wandb_project"),
    KeyMap("trainer.default_local_dir", None, "the run folder is `--out`"),
    KeyMap("trainer.n_gpus_per_node", None, "`accelerate launch --num_processes N`"),
    KeyMap("trainer.nnodes", None, "`accelerate launch --num_machines N`"),
    KeyMap("data.train_files", None, "questions come from data.world_dir"),
    KeyMap("data.val_files", None, "held-out questions: data.eval_split of the same data"),
    KeyMap("data.val_data_num", "data.eval_size"),
    KeyMap("data.max_response_length", "rollout.max_response_tokens", "per turn in both"),
    KeyMap("data.max_obs_length", "rollout.max_obs_tokens"),
    KeyMap("data.max_prompt_length", "rollout.max_total_tokens",
           "here a cap on prompt + response; the prompt is never cut"),
    KeyMap("data.max_start_length", None, "the question prompt is never cut"),
    KeyMap("max_turns", "rollout.max_turns"),
    KeyMap("retriever.url", "data.remote.url", "with data.retriever=remote"),
    KeyMap("retriever.topk", "rollout.topk"),
    KeyMap("do_search", "rollout.search"),
    KeyMap("algorithm.adv_estimator", "algo.advantage", "gae | grpo (also rloo, reinforce)"),
    KeyMap("algorithm.gamma", "algo.gamma"),
    KeyMap("algorithm.lam", "algo.lam"),
    KeyMap("algorithm.kl_ctrl.kl_coef", "algo.kl_coef", "KL in the reward: algo.kl_in_reward=true"),
    KeyMap("algorithm.norm_adv_by_std_in_grpo", "algo.scale_by_std"),
    KeyMap(f"{A}.actor.use_kl_loss", "algo.kl_in_reward", "inverted: use_kl_loss=true is false"),
    KeyMap(f"{A}.actor.kl_loss_coef", "algo.kl_coef"),
    KeyMap(f"{A}.actor.kl_loss_type", "algo.kl_estimator", "low_var_kl is k3, kl is k1"),
    KeyMap(f"{A}.actor.clip_ratio", "algo.clip_eps"),
    KeyMap(f"{A}.actor.entropy_coeff", "algo.entropy_coef"),
    KeyMap(f"{A}.actor.loss_agg_mode", "algo.loss_agg", "same value names"),
    KeyMap(f"{A}.actor.state_masking", "algo.mask_env", "retrieved tokens out of the loss"),
    KeyMap(f"{A}.actor.grad_clip", "optim.grad_clip"),
    KeyMap(f"{A}.actor.optim.lr", "optim.lr"),
    KeyMap(f"{A}.actor.optim.lr_warmup_steps_ratio", "optim.warmup_ratio"),
    KeyMap(f"{A}.actor.optim.weight_decay", "optim.weight_decay"),
    KeyMap("critic.optim.lr", "optim.critic_lr"),
    KeyMap("critic.optim.lr_warmup_steps_ratio", "optim.critic_warmup_ratio"),
    KeyMap("critic.cliprange_value", "algo.value_clip"),
    KeyMap("critic.model.path", None, "the critic starts from the policy's weights"),
    KeyMap(f"{A}.model.path", "model.name_or_path"),
    KeyMap(f"{A}.model.enable_gradient_checkpointing", "policy.gradient_checkpointing"),
    KeyMap(f"{A}.actor.fsdp_config.param_offload", "policy.fsdp_cpu_offload",
           "with policy.strategy=fsdp; offloads parameters, gradients and optimizer together"),
    KeyMap(f"{A}.rollout.name", "model.backend", "vllm | hf (also ct2 on CPUs)"),
    KeyMap(f"{A}.rollout.gpu_memory_utilization", "model.vllm_gpu_memory_utilization"),
    KeyMap(f"{A}.rollout.temperature", "rollout.temperature"),
    KeyMap(f"{A}.rollout.top_p", "rollout.top_p"),
    KeyMap(f"{A}.rollout.tensor_model_parallel_size", None, "one engine per process"),
    KeyMap("reward_model.structure_format_score", "reward.structure_format_score",
           "with reward.kind=format"),
    KeyMap("reward_model.final_format_score", "reward.final_format_score",
           "with reward.kind=format"),
    KeyMap("reward_model.retrieval_score", "reward.retrieval_score", "with reward.kind=format"),
)  # fmt: skip


def translate(theirs: str) -> KeyMap | None:
    """The entry for a veRL / Search-R1 key, if the table has one."""
    return next((entry for entry in KEYS if entry.theirs == theirs), None)
