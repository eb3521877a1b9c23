"""Configuration of RL training (PPO / GRPO); the warm start's is `config.sft`. Every RL default
lives here; `src/searchrl/presets/*.yaml` presets override them and `key=value` arguments
override the presets.

Batch sizes count *prompts* where the paper does (batch 512, mini-batch 256): a step samples
`batch_size` prompts × `n_samples` trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from searchrl.config.checks import (
    Fraction,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
    UrlOrEmpty,
)
from searchrl.config.data import GroundingConfig, WorldConfig
from searchrl.config.errors import ConfigError
from searchrl.config.model import ModelConfig
from searchrl.config.overlap import OverlapConfig
from searchrl.config.plan import PlanConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.config.retrieval import RemoteConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.signal import ScreenConfig, SignalConfig


@dataclass(frozen=True)
class PolicyConfig:
    """How the trained weights are held (which weights to load is `model`, a ModelConfig)."""

    init_checkpoint: str = ""
    """Optional HF directory whose weights replace the loaded model's (e.g. an SFT warm
    start written by `searchrl sft`)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30% more compute."""
    train_layers: NonNegativeInt = 0
    """0 trains every weight; N > 0 trains only the top N transformer layers and the final
    norm (embeddings, tied LM head and lower layers frozen). The backward pass then stops
    at layer N from the top: ~1.8x faster steps on CPU with half of SmolLM2's 30 layers.
    With `lora_rank`, the adapters sit on the top N layers only."""
    lora_rank: NonNegativeInt = 0
    """0 trains all weights; > 0 trains LoRA adapters of this rank (peft) on every linear
    layer of attention and MLP (of the top `train_layers` layers when that is set). RL with
    LoRA matches full fine-tuning down to small ranks at ~10x full fine-tuning's learning
    rate (Schulman et al., "LoRA Without Regret", 2025). The generation engine receives the
    merged weights (`model.generation_dtype=float32` keeps a small adapter step from being
    rounded away in a bf16 engine)."""
    lora_alpha: PositiveInt = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    torch_threads: NonNegativeInt = 0
    """CPU threads for torch (0: the count the command chose at start from the free cores,
    `utils/threads.py`). On a small shared CPU, 1 thread per process is ~2.5x faster than 2
    (OpenMP threads spin when cores are busy). Another count sums floats in another order,
    which changes sampled tokens and so the run: pin it to repeat a run exactly."""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """Several processes (`accelerate launch`): `ddp` keeps a full copy of the model and its
    optimizer on every rank; `fsdp` shards them (torch FSDP2, one unit per decoder layer),
    which is what a 7B model needs. Needs a generation engine with its own copy of the
    weights (vllm): the HF backend would run the sharded module."""
    fsdp_cpu_offload: bool = False
    """FSDP: keep the sharded parameters, gradients and optimizer states in CPU memory
    (the paper's 7B setting on 8 GPUs); slower steps, much less GPU memory."""
    autocast: Literal["auto", "bf16", "fp32"] = "auto"
    """bf16 autocast for training forwards (fp32 master weights and optimizer stay). `auto` =
    on for CUDA, off on CPU: CPUs without native bf16 (no AVX512-BF16/AMX) run bf16 matmuls
    ~50x slower than fp32 (measured here: 1.2 vs 57 GFLOP/s)."""


@dataclass(frozen=True)
class DataConfig:
    """Where questions, corpus and index come from: real QA files (`train_files`, searched
    through `index_dir`) or the synthetic world (`world_dir`, or one generated)."""

    train_files: tuple[str, ...] = ()
    """Training questions, one spec or a list (veRL's and Search-R1's name): a Search-R1
    parquet (its `prompt` column is used as written), a FlashRAG JSONL, `hf:NAME:SPLIT` (the
    `hf` extra), or a world directory; `PATH[a:b]` keeps rows a..b-1 of a file. Several mix
    into one shuffled pool (the paper's NQ + HotpotQA), each question's GRPO group keyed by
    `<source>:<id>`. Empty: the world's `train_split`. Relative paths are read from the
    working directory."""
    val_files: tuple[str, ...] = ()
    """Held-out questions for `val/test_score/<source>`, specs as in `train_files` (a world
    directory gives its `eval_split`). Needed with `train_files` when `eval_size > 0`."""
    world_dir: str = ""
    """Directory written by `searchrl data world` (corpus, splits, reference trajectories).
    Empty and no `train_files`: generate `world` into the run folder."""
    world: WorldConfig = field(default_factory=WorldConfig)
    """The synthetic world generated into `<out>/world` when `world_dir` is empty."""
    index_dir: str = ""
    """Any index `searchrl index` builds or links (BM25, dense Flat/IVF-PQ/HNSW with its
    encoder, hybrid, shards, a faiss index built elsewhere), searched in this process;
    empty builds BM25 over the world's corpus in memory. Needed with `train_files` unless
    `retriever: remote`."""
    retriever: Literal["bm25", "remote"] = "bm25"
    """`bm25` searches in process (`index_dir`, whatever its kind, else the world's corpus
    with BM25); `remote` sends every search to a Search-R1 compatible `/retrieve` server at
    `remote.url` (e.g. `searchrl serve`), as the paper trains. A search that still fails
    after the client's retries fails only its trajectories."""
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    """Client settings (URL, per-attempt timeout, retries, backoff) for `retriever: remote`."""
    train_split: NonEmptyStr = "train"
    """World split sampled for training (when `train_files` is empty)."""
    exclude_trained_by: str = ""
    """A `searchrl sft` run folder (its `trained_questions.txt`) or a file of question ids,
    one a line: those questions are left out of the RL pool. The warm start has memorised the
    answers of the references it was trained on (their thoughts state every hop's fact), so
    their GRPO groups are mostly all correct and teach nothing."""
    train_hop_weights: tuple[PositiveFloat, ...] = ()
    """Relative weight of train questions of 1, 2, 3, … hops in the order prompts are drawn
    (each pass over the pool is a weighted shuffle: heavier questions tend to come first);
    empty = uniform. Hop counts past the tuple take its last weight."""
    eval_split: NonEmptyStr = "test"
    """World split used for `val/test_score/<source>` (when `val_files` is empty)."""
    eval_size: NonNegativeInt = 32
    """Held-out questions evaluated (greedy) every `eval_every` steps; 0 disables."""
    mix_seed: int = 0
    """Seed of the shuffle that pools several `train_files` / `val_files` (the first
    `eval_size` held-out questions are then a mix of their sources)."""
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    """How reference trajectories are made for real questions (`searchrl sft`)."""

    def validate(self) -> None:
        """Real questions need a search engine."""
        if self.val_files and not self.train_files:
            raise ConfigError("val_files: give data.train_files too (or neither)")
        if self.train_files and self.retriever != "remote" and not self.index_dir:
            raise ConfigError(
                "index_dir: data.train_files needs an index to search (build one with "
                "`searchrl index --kind bm25|dense --corpus C --out IDX`) or data.retriever=remote"
            )


@dataclass(frozen=True)
class AlgoConfig:
    """The RL algorithm: advantage estimator, losses and masking."""

    advantage: Literal["gae", "grpo", "rloo", "reinforce"] = "grpo"
    """`gae` needs a critic (PPO); the others are critic-free."""
    gamma: Fraction = 1.0
    """Discount for GAE (paper: 1)."""
    lam: Fraction = 1.0
    """GAE λ (paper: 1, i.e. advantage = return − value)."""
    scale_by_std: bool = True
    """GRPO: divide the group-centred reward by the group std (off = Dr. GRPO)."""
    whiten_advantages: bool = True
    """GAE: whiten advantages over the batch's trained tokens (verl/Search-R1 PPO does)."""
    adv_eps: PositiveFloat = 1e-6
    """Added to the group std so zero-variance groups give 0, not NaN."""
    clip_eps: PositiveFloat = 0.2
    """PPO ratio clip ε."""
    value_clip: PositiveFloat = 0.5
    """Critic value clip range around the old values."""
    kl_coef: NonNegativeFloat = 0.001
    """β for the KL to the frozen reference."""
    kl_in_reward: bool = False
    """True: −β·KL is added to token rewards (PPO); False: β·KL is a loss term (GRPO)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL loss estimator (k3 = Schulman's low-variance one, used by Search-R1 GRPO)."""
    entropy_coef: NonNegativeFloat = 0.0
    """Entropy bonus weight (Search-R1: 0, entropy is only logged)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: groups whose rewards are all equal (zero advantage) are not
    trained on; more prompts are drawn until `batch_size` informative groups exist."""
    max_sampling_rounds: PositiveInt = 3
    """Dynamic sampling: most rollout rounds per step (then train on what was found)."""
    mask_env: bool = True
    """Retrieved-token masking. False reproduces the paper's no-masking ablation."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = (
        "seq-mean-token-mean"
    )
    """How per-token losses become a scalar: the paper's formula is seq-mean-token-mean (a
    trajectory's tokens averaged, so a token of a short trajectory weighs more); verl's
    token-mean; Dr. GRPO's seq-mean-token-sum-norm (token sums over `loss_norm_tokens`, no
    length bias: see `algo.losses`)."""
    loss_norm_tokens: NonNegativeInt = 0
    """The constant of `seq-mean-token-sum-norm`; 0 = the trajectory's generation budget,
    (rollout.max_turns + 1) · rollout.max_response_tokens."""
    behaviour_correction: Literal["auto", "tis", "off"] = "auto"
    """Truncated importance sampling against the generation engine's log-probs: `auto` = on
    when the engine samples at another precision than the fp32 trainer (a bf16 generation
    copy, vLLM); the old log-probs are then always recomputed."""
    tis_cap: PositiveFloat = 2.0
    """C in the per-token weight min(π_old/μ, C) (Yao et al. 2025 use 2)."""


@dataclass(frozen=True)
class OptimConfig:
    """Optimizers and schedules for policy and critic."""

    lr: PositiveFloat = 1e-6
    """Policy learning rate."""
    critic_lr: PositiveFloat = 1e-5
    """Critic learning rate (PPO)."""
    warmup_ratio: Fraction = 0.285
    """Fraction of steps with linear policy lr warm-up, then constant."""
    critic_warmup_ratio: Fraction = 0.015
    """Fraction of steps with linear critic lr warm-up."""
    weight_decay: NonNegativeFloat = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global grad norm (≤ 0 disables clipping)."""


@dataclass(frozen=True)
class LLMJudgeConfig:
    """The `llm` process judge: any OpenAI-compatible endpoint (vLLM, llama.cpp's server,
    SGLang), asked greedily (temperature 0) as in Search-R2 Appendix K."""

    url: UrlOrEmpty = ""
    """Base URL of the API (`http://host:port/v1`); `/chat/completions` is appended."""
    model: str = ""
    """Model name sent with each request (the paper: DeepSeek-R1-Distill-Qwen-7B)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (sent as a bearer token when set)."""
    concurrency: PositiveInt = 8
    """Requests in flight at once: a step's trajectories are judged together."""
    timeout_s: PositiveFloat = 120.0
    """Per-request timeout (a reasoning judge writes up to `max_tokens` tokens)."""
    retries: NonNegativeInt = 2
    """Retries after a connection error, timeout or 5xx answer (exponential backoff)."""
    max_tokens: PositiveInt = 3000
    """Completion budget of one judgement (the paper: 3,000)."""


@dataclass(frozen=True)
class LocalJudgeConfig:
    """The `local` process judge: the same prompt on a local model through the project's
    generation backend."""

    model: str = ""
    """Model to load (`embedded`, a HF id or directory, a `.gguf`); empty = the policy being
    trained judges its own searches (cheap, but it grades itself)."""
    max_tokens: PositiveInt = 3000
    """Completion budget of one judgement (the paper: 3,000)."""


@dataclass(frozen=True)
class RewardConfig:
    """The reward applied to each finished trajectory."""

    kind: Literal["em", "f1", "format", "hybrid"] = "em"
    """`em` (paper), `f1`, Search-R1 v0.3's format-aware EM, or Search-R2's gated hybrid
    R = EM · (1 + (1/M) Σ u_i) over the trajectory's M searches (u_i from `judge`)."""
    process: bool = True
    """`hybrid` only. On: the judged process term is added (R ∈ {0} ∪ [1, 2]). Off: `hybrid`
    scores plain EM and no judge runs (Search-R2's "without process reward" ablation rows).
    Ignored by the other kinds."""
    judge: Literal["oracle", "rule", "llm", "local"] = "rule"
    """Who marks each retrieved collection useful: `oracle` (synthetic world only: it holds a
    supporting passage of the question's chain no earlier search returned), `rule` (a gold
    answer or a needed entity appears that no earlier collection showed), `llm` (the paper's
    judge prompt on an OpenAI-compatible endpoint, `llm_judge`), `local` (the same prompt on
    a local model, `local_judge`)."""
    judge_cache_size: NonNegativeInt = 100_000
    """Judgements remembered by (question, collections); GRPO samples of one question often
    retrieve the same passages. 0 disables the cache."""
    llm_judge: LLMJudgeConfig = field(default_factory=LLMJudgeConfig)
    """Endpoint settings for `judge: llm`."""
    local_judge: LocalJudgeConfig = field(default_factory=LocalJudgeConfig)
    """Model settings for `judge: local`."""
    structure_format_score: Fraction = 0.2
    """Format reward: a well-formed trajectory with a wrong answer earns this; a correct
    answer in a malformed one loses it (1 − this)."""
    final_format_score: Fraction = 0.1
    """Format reward: a malformed trajectory that still gives an answer."""
    retrieval_score: NonNegativeFloat = 0.0
    """Format reward: bonus when a gold answer appears in the retrieved text (v0.3: 0)."""
    no_answer_score: float = 0.0
    """`em`, `f1` and `hybrid`: the score of a trajectory that ends without an answer (turn
    limit, length cap). The paper's 0 scores it like a wrong answer, so nothing in the reward
    pays for answering; a negative value (e.g. −0.5) ranks "no answer" below "wrong answer"
    inside each GRPO group."""

    def validate(self) -> None:
        """The endpoint judge cannot run without an endpoint."""
        if self.kind == "hybrid" and self.process and self.judge == "llm":
            if not self.llm_judge.url:
                raise ConfigError(
                    "llm_judge.url: `judge: llm` needs an OpenAI-compatible endpoint, e.g. "
                    "reward.llm_judge.url=http://127.0.0.1:8000/v1"
                )
            if not self.llm_judge.model.strip():
                raise ConfigError(
                    "llm_judge.model: `judge: llm` needs the model name the endpoint serves"
                )


@dataclass(frozen=True)
class DistillConfig:
    """Self-distillation between RL phases: every `every` steps, a short SFT pass on the
    policy's own correct, well-formed trajectories of multi-hop questions sampled in those
    steps (one per question), then RL goes on (`train.distill`)."""

    every: NonNegativeInt = 0
    """0: off. N: after RL steps N, 2N, … (not after the last step)."""
    min_hops: PositiveInt = 2
    """Only trajectories of questions with at least this many hops."""
    lr: PositiveFloat = 1e-5
    """Peak learning rate of each pass (linear decay to 0, its own AdamW)."""
    epochs: PositiveFloat = 1.0
    """Passes over the selected trajectories."""
    batch_size: PositiveInt = 8
    """Trajectories per optimizer step."""


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

    seed: Seed = 0
    """Seeds sampling, rollouts and initialisation (CPU runs are bit-reproducible)."""
    steps: PositiveInt = 500
    """Optimizer steps (each on a fresh batch of rollouts)."""
    batch_size: PositiveInt = 512
    """Prompts per step."""
    n_samples: PositiveInt = 5
    """Trajectories per prompt (the GRPO group size G)."""
    mini_batch_size: PositiveInt = 256
    """Prompts per policy update (batch_size / mini_batch_size updates per epoch)."""
    micro_batch_size: PositiveInt = 8
    """Sequences per forward/backward in each process (gradient accumulation fills the
    mini-batch): unlike the batch sizes, not divided among the processes. veRL's (and the
    paper's) `ppo_micro_batch_size=64` counts all GPUs: 8 a GPU on 8 GPUs. The sequences of
    a micro-batch are packed into one row (no padding)."""
    micro_batch_tokens: NonNegativeInt = 0
    """> 0: a forward also holds at most this many tokens (a longer sequence goes alone), so
    many short trajectories share a forward while a few long ones cannot exhaust memory."""
    ppo_epochs: PositiveInt = 1
    """Passes over each step's rollouts."""
    save_every: PositiveInt = 100
    """Checkpoint every N steps (the last step is always saved)."""
    keep_checkpoints: NonNegativeInt = 2
    """Older checkpoints beyond this many are deleted."""
    eval_every: NonNegativeInt = 0
    """Greedy held-out evaluation every N steps (0: only before and after training)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    refiner: RefinerConfig = field(default_factory=RefinerConfig)
    overlap: OverlapConfig = field(default_factory=OverlapConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    signal: SignalConfig = field(default_factory=SignalConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)

    def validate(self) -> None:
        """Meta rows carry their trajectory's sequence-level advantage; a critic has no value
        for a meta prompt, so joint optimization needs a critic-free estimator. Real training
        questions come with no held-out split of their own. Distillation reads the steps'
        trajectories back from the run folder."""
        if self.refiner.joint and self.uses_critic:
            raise ConfigError("refiner.joint: needs a critic-free algo.advantage (grpo, rloo)")
        if self.distill.every and not self.logging.save_trajectories:
            raise ConfigError(
                "distill.every: reads each step's trajectories from the run folder; "
                "set logging.save_trajectories=true"
            )
        if self.data.train_files and self.data.eval_size > 0 and not self.data.val_files:
            raise ConfigError(
                "data.val_files: data.eval_size > 0 evaluates held-out questions; give "
                "data.val_files or set data.eval_size=0"
            )

    @property
    def loss_norm_tokens(self) -> int:
        """The constant of the Dr. GRPO aggregation: `algo.loss_norm_tokens`, or else the most
        tokens a trajectory can generate ((max_turns + 1) rounds of max_response_tokens)."""
        if self.algo.loss_norm_tokens > 0:
            return self.algo.loss_norm_tokens
        return (self.rollout.max_turns + 1) * self.rollout.max_response_tokens

    @property
    def uses_critic(self) -> bool:
        """PPO (GAE) trains a value model; the group estimators don't."""
        return self.algo.advantage == "gae"
