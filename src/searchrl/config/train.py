"""Configuration of RL training (PPO / GRPO), SFT and the demo. Every training default lives
here; `configs/*.yaml` presets override them and `key=value` arguments override the presets.

Batch sizes count *prompts* where the paper does (batch 512, mini-batch 256): a step samples
`batch_size` prompts × `n_samples` trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ModelConfig:
    """Which weights to train and how to hold them."""

    name: str = "embedded"
    """`embedded` (SmolLM2-135M-Instruct GGUF), a hub id, a local directory or a .gguf file."""
    init_checkpoint: str = ""
    """Optional HF directory whose weights replace `name`'s (e.g. an SFT warm start)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30% more compute."""
    lora_rank: int = 0
    """0 trains all weights; > 0 trains LoRA adapters of this rank (peft) on attention/MLP."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    generation_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Dtype of the copy used for rollouts, re-synced after each update (bf16 halves CPU
    rollout time; fp32 master weights stay in the trainer)."""
    autocast_bf16: bool = True
    """Run training forwards under bf16 autocast (GPU, and CPUs with fast bf16)."""


@dataclass(frozen=True)
class DataConfig:
    """Where questions, corpus and index come from."""

    world_dir: str = ""
    """Directory written by `searchrl data world` (corpus, splits, reference trajectories).
    Empty: generate a world with `world_entities`/`world_seed` into the run folder."""
    world_entities: int = 300
    """Size of a generated synthetic world (entities)."""
    world_seed: int = 0
    """Seed of a generated synthetic world."""
    index_dir: str = ""
    """Prebuilt BM25 index; empty builds one from the corpus in memory."""
    train_split: str = "train"
    """Question split sampled for training."""
    eval_split: str = "test"
    """Held-out split used for `val/test_score/<source>`."""
    eval_size: int = 32
    """Held-out questions evaluated (greedy) every `eval_every` steps; 0 disables."""


@dataclass(frozen=True)
class AlgoConfig:
    """The RL algorithm: advantage estimator, losses and masking."""

    advantage: Literal["gae", "grpo", "rloo", "reinforce"] = "grpo"
    """`gae` needs a critic (PPO); the others are critic-free."""
    gamma: float = 1.0
    """Discount for GAE (paper: 1)."""
    lam: float = 1.0
    """GAE λ (paper: 1, i.e. advantage = return − value)."""
    scale_by_std: bool = True
    """GRPO: divide the group-centred reward by the group std (off = Dr. GRPO)."""
    adv_eps: float = 1e-6
    """Added to the group std so zero-variance groups give 0, not NaN."""
    clip_eps: float = 0.2
    """PPO ratio clip ε."""
    value_clip: float = 0.5
    """Critic value clip range around the old values."""
    kl_coef: float = 0.001
    """β for the KL to the frozen reference."""
    kl_in_reward: bool = False
    """True: −β·KL is added to token rewards (PPO); False: β·KL is a loss term (GRPO)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL loss estimator (k3 = Schulman's low-variance one, used by Search-R1 GRPO)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (Search-R1: 0, entropy is only logged)."""
    mask_env: bool = True
    """Retrieved-token masking. False reproduces the paper's no-masking ablation."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean"] = "seq-mean-token-mean"
    """How per-token losses become a scalar (the paper's formula is seq-mean-token-mean)."""


@dataclass(frozen=True)
class OptimConfig:
    """Optimizers and schedules for policy and critic."""

    lr: float = 1e-6
    """Policy learning rate."""
    critic_lr: float = 1e-5
    """Critic learning rate (PPO)."""
    warmup_ratio: float = 0.285
    """Fraction of steps with linear policy lr warm-up, then constant."""
    critic_warmup_ratio: float = 0.015
    """Fraction of steps with linear critic lr warm-up."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global grad norm (≤ 0 disables clipping)."""


@dataclass(frozen=True)
class RewardConfig:
    """Outcome reward applied to each finished trajectory."""

    kind: Literal["em", "f1", "format"] = "em"
    """`em` (paper), `f1`, or Search-R1 v0.3's format-aware EM."""
    structure_format_score: float = 0.2
    """Format reward: a well-formed trajectory with a wrong answer earns this; a correct
    answer in a malformed one loses it (1 − this)."""
    final_format_score: float = 0.1
    """Format reward: a malformed trajectory that still gives an answer."""
    retrieval_score: float = 0.0
    """Format reward: bonus when a gold answer appears in the retrieved text (v0.3: 0)."""


@dataclass(frozen=True)
class RolloutSettings:
    """Sampling for training rollouts (the rollout engine owns the multi-turn protocol)."""

    max_turns: int = 4
    """B: search calls per trajectory."""
    topk: int = 3
    """Passages per search."""
    max_turn_tokens: int = 500
    """New tokens per generation turn."""
    max_obs_tokens: int = 500
    """Tokens of retrieved content per observation."""
    max_total_tokens: int = 4096
    """Prompt + response budget."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (evaluation is greedy)."""
    top_p: float = 1.0
    """Nucleus sampling for training rollouts."""
    backend: Literal["hf", "vllm"] = "hf"
    """Generation engine; vLLM needs a GPU and gets the weights after every update."""


@dataclass(frozen=True)
class LoggingConfig:
    """Where metrics go besides `metrics.jsonl`."""

    tensorboard: bool = True
    """Also write TensorBoard event files under `<out>/tensorboard`."""
    wandb_project: str = ""
    """Non-empty: also log to this Weights & Biases project (needs `wandb`)."""
    progress: bool = True
    """Show a rich progress bar."""
    save_trajectories: bool = True
    """Write each step's trajectories to `<out>/trajectories/step_N.jsonl`."""


@dataclass(frozen=True)
class TrainConfig:
    """One RL run: `searchrl train --config PRESET --out DIR key=value ...`."""

    seed: int = 0
    """Seeds sampling, rollouts and initialisation (CPU runs are bit-reproducible)."""
    steps: int = 500
    """Optimizer steps (each on a fresh batch of rollouts)."""
    batch_size: int = 512
    """Prompts per step."""
    n_samples: int = 5
    """Trajectories per prompt (the GRPO group size G)."""
    mini_batch_size: int = 256
    """Prompts per policy update (batch_size / mini_batch_size updates per epoch)."""
    micro_batch_size: int = 8
    """Sequences per forward/backward (gradient accumulation fills the mini-batch)."""
    ppo_epochs: int = 1
    """Passes over each step's rollouts."""
    save_every: int = 100
    """Checkpoint every N steps (the last step is always saved)."""
    keep_checkpoints: int = 2
    """Older checkpoints beyond this many are deleted."""
    eval_every: int = 0
    """Greedy held-out evaluation every N steps (0: only before and after training)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def uses_critic(self) -> bool:
        """PPO (GAE) trains a value model; the group estimators don't."""
        return self.algo.advantage == "gae"


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm start on reference (or rejection-sampled) trajectories."""

    seed: int = 0
    """Shuffling seed."""
    source: Literal["references", "rejection"] = "references"
    """`references`: the world's reference trajectories; `rejection`: sample with search via
    the rollout engine and keep the correct ones (the paper's rejection-sampling baseline)."""
    max_examples: int = 300
    """Trajectories used (the first N after shuffling)."""
    epochs: float = 0.65
    """Passes over the examples (fractional: stop part-way through the last one)."""
    batch_size: int = 8
    """Sequences per optimizer step."""
    micro_batch_size: int = 4
    """Sequences per forward/backward."""
    lr: float = 1e-4
    """Peak learning rate."""
    warmup_ratio: float = 0.05
    """Linear warm-up fraction, then linear decay to 0."""
    grad_clip: float = 1.0
    """Max global grad norm."""
    mask_env: bool = True
    """Mask env tokens (retrieved passages) out of the loss, as in RL."""
    rejection_samples: int = 4
    """Rejection sampling: trajectories sampled per question."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
