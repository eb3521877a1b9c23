"""What each rank of a training run will hold in GPU memory, added up before anything loads:
printed by `searchrl train --dry-run`, and checked by every run on GPUs (`plan.check`), which
refuses, in one line saying by how much, a setting that cannot fit.

The model's sizes come from its config.json alone: the model is built on PyTorch's meta
device (shapes, no storage), so parameter counts are exact for any architecture transformers
knows. The rest is arithmetic, in bytes per rank:

- **trained weights**: fp32 master weights (4 B/param), fp32 gradients (4 B per trained
  param) and AdamW's two moments (8 B per trained param): 16 B/param. DDP (and one process)
  keeps all of it on every GPU; FSDP divides it by the ranks and adds the units gathered
  whole for the layer being computed (the outer unit, embeddings and head, plus two decoder
  layers: the current one and the one prefetched); FSDP's CPU offload moves the shards to
  host memory. LoRA trains the adapters only; `train_layers` the top layers only.
- **frozen reference** (`algo.kl_coef > 0`, no LoRA): fp32 weights, sharded like the policy.
- **critic** (PPO): the backbone without the LM head plus a scalar head, trained like the
  policy (16 B/param).
- **activations** of one micro-batch: its tokens are packed into one row, at most
  `micro_batch_size` sequences of `rollout.max_total_tokens` (or `micro_batch_tokens`); with
  gradient checkpointing one fp32 hidden state per layer is kept plus one layer's
  activations while it is recomputed, without it every layer's; the LM head's logits at the
  trained positions (at most each sequence's policy-token budget) take 12 B per vocabulary
  entry (bf16 logits, their fp32 copy, the fp32 gradient and its bf16 cast); bf16 autocast
  keeps a bf16 copy of the weights it multiplies (2 B/param) until the forward's region ends.
- **vLLM**: `vllm_gpu_memory_utilization` of the GPU, reserved at the engine's start: its
  weights (in the engine's dtype, the LM head untied), its own working memory
  (`ENGINE_WORKSPACE_GIB`) and the KV cache in what is left (2 × layers × KV heads × head size
  × 2 B per token), which must hold one whole sequence. While the trainer updates, a
  sleeping engine (`vllm_sleep_mode`) keeps only its workspace.
- **CUDA**: every process's context, NCCL buffers and allocator slack (`CUDA_OVERHEAD_GIB`).

A rank's peak is the larger of the rollout phase (the trainer's resident state plus vLLM's
share) and the update phase (resident state, gradients, gathered units, activations, plus
what the engine keeps). These are estimates of the worst micro-batch, not measurements;
`benchmarks/rollout/gpu_check.sh` compares one with a run's measured peak.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from searchrl.config.train import TrainConfig
from searchrl.utils.errors import SearchRLError

GIB = 2**30
ENGINE_WORKSPACE_GIB = 2.0
"""vLLM's memory besides weights and KV cache (activations of its profile run, the sampler,
CUDA graphs), an estimate; what a sleeping engine keeps."""
CUDA_OVERHEAD_GIB = 1.5
"""A process's CUDA context, NCCL buffers and allocator fragmentation, an estimate."""
LOGIT_BYTES = 12
"""Bytes per logit of the LM head in the update (module docstring)."""
ENGINE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
"""The engine's weights in its dtype (`model.generation_dtype`; `auto` is bf16 on a GPU)."""


class PlanDoesNotFit(SearchRLError):
    """A training run whose memory plan exceeds its GPUs."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a causal LM that the plan needs, read from its config."""

    name: str
    params: int
    layer_params: int
    """The largest decoder layer's (one FSDP unit)."""
    head_params: int
    """The LM head's own (0 when tied to the embedding)."""
    embed_params: int
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_dim: int
    """KV heads × head size."""

    @classmethod
    def from_config(cls, hf_config: Any, name: str) -> ModelShape:
        """Built on the meta device (no storage) to count its parameters exactly."""
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
        text = getattr(hf_config, "text_config", None) or hf_config
        layers = next(m for n, m in model.named_modules() if n.endswith("layers"))
        heads = int(text.num_attention_heads)
        head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
        embed = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        return cls(
            name=name,
            params=sum(p.numel() for p in model.parameters()),
            layer_params=max(sum(p.numel() for p in layer.parameters()) for layer in layers),
            head_params=0 if head is embed else head.numel(),
            embed_params=embed.numel(),
            hidden=int(text.hidden_size),
            intermediate=int(text.intermediate_size),
            layers=len(layers),
            vocab=int(text.vocab_size),
            kv_dim=int(getattr(text, "num_key_value_heads", None) or heads) * head_dim,
        )

    def lora_params(self, rank: int) -> int:
        """Adapters of rank `rank` on every linear layer of every decoder layer (peft's
        `all-linear`: q, k, v, o, gate, up, down)."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        return rank * self.layers * (7 * h + 2 * kv + 3 * i)


def read_shape(config: TrainConfig) -> ModelShape:
    """The policy's shape from its config.json (`policy.init_checkpoint`'s where set)."""
    from searchrl.models.loading import load_model_config

    source = config.policy.init_checkpoint or config.model.name_or_path
    try:
        hf_config, _ = load_model_config(replace(config.model, name_or_path=source))
    except (OSError, ValueError) as err:
        raise SearchRLError(
            f"{source}: no model config to plan with ({type(err).__name__}); give a local "
            "folder holding the model's config.json (no weights are read)"
        ) from None
    return ModelShape.from_config(hf_config, source)


@dataclass(frozen=True)
class Item:
    """One line of the plan: bytes a rank holds on its GPU and in host memory."""

    name: str
    gpu: float
    host: float = 0.0
    when: str = "always"
    """`always`, `rollout` (while the engine generates) or `update` (while the trainer
    computes gradients)."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank memory of one training setting on `gpus` GPUs of `gpu_bytes` each."""

    shape: ModelShape
    gpus: int
    gpu_bytes: float
    strategy: str
    items: list[Item]
    kv_tokens: int
    problems: list[str]

    def phase(self, when: str) -> float:
        """Bytes on one GPU during the rollout or the update phase."""
        return sum(i.gpu for i in self.items if i.when in ("always", when))

    @property
    def need(self) -> float:
        return max(self.phase("rollout"), self.phase("update"))

    @property
    def fits(self) -> bool:
        return self.need <= self.gpu_bytes and not self.problems

    def verdict(self) -> str:
        """One line: how much is left, or by how much it does not fit and why."""
        gib, have = self.need / GIB, self.gpu_bytes / GIB
        if self.need > self.gpu_bytes:
            when = "update" if self.phase("update") >= self.phase("rollout") else "rollout"
            during = [i for i in self.items if i.when in ("always", when)]
            top = sorted(during, key=lambda i: -i.gpu)[:2]
            return (
                f"the memory plan needs {gib:.1f} GiB a GPU, {gib - have:.1f} GiB more than "
                f"the {have:.1f} GiB of one (largest: {top[0].name} {top[0].gpu / GIB:.1f}, "
                f"{top[1].name} {top[1].gpu / GIB:.1f} GiB); `searchrl train --dry-run` "
                "prints the whole plan"
            )
        if self.problems:
            return self.problems[0]
        return f"fits: {gib:.1f} of {have:.1f} GiB a GPU ({have - gib:.1f} GiB to spare)"

    def table(self) -> str:
        """The plan as a text table, one rank's share per line."""
        s = self.shape
        lines = [
            f"memory plan per rank: {s.name} ({s.params / 1e9:.2f} B parameters, "
            f"{s.layers} layers, vocabulary {s.vocab}), {self.gpus} GPU"
            f"{'s' if self.gpus > 1 else ''} of {self.gpu_bytes / GIB:.0f} GiB, {self.strategy}",
            f"{'':46} {'GPU GiB':>8} {'host GiB':>9}  when",
        ]
        for item in self.items:
            lines.append(
                f"{item.name:46} {item.gpu / GIB:8.2f} {item.host / GIB:9.2f}  {item.when}"
            )
        host = sum(i.host for i in self.items if i.when != "start")
        lines += [
            f"{'peak while generating':46} {self.phase('rollout') / GIB:8.2f}",
            f"{'peak while updating':46} {self.phase('update') / GIB:8.2f} {host / GIB:9.2f}",
            f"vLLM KV cache: {self.kv_tokens:,} tokens" if self.kv_tokens else "vLLM: none",
            self.verdict(),
        ]
        return "\n".join(lines)


def _trained(config: TrainConfig, shape: ModelShape) -> int:
    """Parameters the optimizer updates."""
    policy = config.policy
    if policy.lora_rank > 0:
        return shape.lora_params(policy.lora_rank)
    if policy.train_layers > 0:
        return policy.train_layers * shape.layer_params + shape.hidden
    return shape.params


def _placed(name: str, size: float, world: int, sharded: bool, offload: bool) -> Item:
    """`size` bytes of one model's state, on the GPU or (offloaded) in host memory."""
    share = size / world if sharded else size
    return Item(name, 0.0, share) if offload else Item(name, share)


def _tokens(config: TrainConfig) -> tuple[int, int]:
    """(tokens in one forward, LM-head positions in it) at the worst micro-batch."""
    rollout = config.rollout
    rows = config.micro_batch_size * rollout.max_total_tokens
    tokens = rows
    if config.micro_batch_tokens > 0:
        tokens = min(rows, max(config.micro_batch_tokens, rollout.max_total_tokens))
    budget = min((rollout.max_turns + 1) * rollout.max_response_tokens, rollout.max_total_tokens)
    return tokens, min(tokens, config.micro_batch_size * budget)


def _activations(config: TrainConfig, shape: ModelShape, critic: bool) -> float:
    """Bytes of one micro-batch's activations (module docstring)."""
    tokens, logits = _tokens(config)
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_dim
    layer = 4 * 6 * h + 2 * (4 * h + 4 * kv) + 2 * 4 * i  # fp32 stream, bf16 attention, MLP
    if config.policy.gradient_checkpointing:
        hidden = shape.layers * 4 * h + layer
    else:
        hidden = shape.layers * layer
    head = 0 if critic else logits * shape.vocab * LOGIT_BYTES
    casts = 2 * shape.params if config.policy.autocast != "fp32" else 0
    return tokens * hidden + head + casts


def _engine(config: TrainConfig, shape: ModelShape, gpu_bytes: float) -> tuple[list[Item], int]:
    """vLLM's items and its KV cache in tokens (0 without vLLM)."""
    model = config.model
    if model.backend == "hf":
        copy = 2 * shape.params if model.generation_dtype != "float32" else 0
        return [Item("HF generation copy (bf16)", copy)], 0
    share = model.vllm_gpu_memory_utilization * gpu_bytes
    dtype_bytes = ENGINE_DTYPE_BYTES[model.generation_dtype]
    weights = dtype_bytes * (shape.params + (shape.embed_params if not shape.head_params else 0))
    workspace = ENGINE_WORKSPACE_GIB * GIB
    kv = share - weights - workspace
    per_token = 2 * shape.layers * shape.kv_dim * 2
    sleeps = model.vllm_sleep_mode != "off" and not config.overlap.enabled
    label = f"vLLM share ({model.vllm_gpu_memory_utilization:.2f} of the GPU)"
    items = [Item(label, share, when="rollout" if sleeps else "always")]
    if sleeps:
        items.append(Item("vLLM asleep (workspace kept)", workspace, when="update"))
    return items, max(int(kv // per_token), 0)


def make_plan(config: TrainConfig, shape: ModelShape, gpus: int, gpu_bytes: float) -> MemoryPlan:
    """The memory plan of `config` for `gpus` processes on GPUs of `gpu_bytes` each."""
    policy = config.policy
    sharded = policy.strategy == "fsdp" and gpus > 1
    offload = sharded and policy.fsdp_cpu_offload
    strategy = ("FSDP" + (" + CPU offload" if offload else "")) if sharded else "DDP"
    if gpus == 1:
        strategy = "one process"
    trained = _trained(config, shape)
    place = lambda name, size: _placed(name, size, gpus, sharded, offload)  # noqa: E731
    items = [
        Item("CUDA context, NCCL, allocator slack", CUDA_OVERHEAD_GIB * GIB),
        place("policy weights (fp32)", 4 * shape.params),
        place("AdamW moments (fp32)", 8 * trained),
        replace(place("policy gradients (fp32)", 4 * trained), when="update"),
    ]
    if config.algo.kl_coef > 0 and policy.lora_rank == 0:
        items.append(place("frozen reference (fp32)", 4 * shape.params))
    critic_params = shape.params - shape.head_params
    if config.uses_critic:
        items.append(place("critic weights + AdamW (fp32)", 12 * critic_params))
        items.append(replace(place("critic gradients (fp32)", 4 * critic_params), when="update"))
    if sharded:
        unit = 4 * (shape.embed_params + shape.head_params + 2 * shape.layer_params)
        items.append(Item("FSDP units gathered whole", unit, when="update"))
    tokens, logits = _tokens(config)
    act = _activations(config, shape, critic=False)
    if config.uses_critic:
        act = max(act, _activations(config, shape, critic=True))
    items.append(
        Item(f"activations ({tokens:,} tokens, {logits:,} logit rows)", act, when="update")
    )
    engine, kv_tokens = _engine(config, shape, gpu_bytes)
    items.extend(engine)
    problems = []
    if config.model.backend != "hf" and kv_tokens < config.rollout.max_total_tokens:
        problems.append(
            f"vLLM's share (model.vllm_gpu_memory_utilization="
            f"{config.model.vllm_gpu_memory_utilization}) leaves a KV cache of {kv_tokens:,} "
            f"tokens, less than one sequence of {config.rollout.max_total_tokens:,}"
        )
    plan = MemoryPlan(shape, gpus, gpu_bytes, strategy, items, kv_tokens, problems)
    return _with_load(plan, shape, gpus)


def _with_load(plan: MemoryPlan, shape: ModelShape, gpus: int) -> MemoryPlan:
    """Host memory at start: every rank reads the whole fp32 model before it is sharded or
    moved to its GPU (a node of 8 ranks holds 8 copies for a moment)."""
    load = Item("model read at start (fp32, host, once)", 0.0, 4 * shape.params, when="start")
    return replace(plan, items=[*plan.items, load])


def gpu_memory_here() -> tuple[int, float] | None:
    """(processes of this run, bytes of this rank's GPU), or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return world, float(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)


def check_plan(config: TrainConfig) -> MemoryPlan | None:
    """Before a run on GPUs loads anything: its plan for this run's GPUs, refused in one line
    when it does not fit (`plan.check`). None on CPUs."""
    here = gpu_memory_here()
    if here is None or not config.plan.check:
        return None
    plan = make_plan(config, read_shape(config), *here)
    if not plan.fits:
        raise PlanDoesNotFit(plan.verdict())
    return plan


def dry_run_plan(config: TrainConfig) -> MemoryPlan:
    """The plan for the GPUs `config.plan` names (`searchrl train --dry-run`)."""
    return make_plan(config, read_shape(config), config.plan.gpus, config.plan.gpu_memory_gib * GIB)
