"""A warm start shipped inside the package: `model.name_or_path=embedded-warm` is the embedded
SmolLM2-135M-Instruct with a LoRA adapter of an SFT warm start merged into it.

Why: the embedded base model never writes `<search>` from the paper's prompt, so RL started
from it has nothing to reinforce (every trajectory ends without a search or an answer). A
warm start is a full 135M-parameter model (540 MB in fp32); its change to the base, as
low-rank factors of every linear layer of the decoder, is a few MB, small enough to ship.

The adapter is peft's own format (`adapter_config.json` + `adapter_model.safetensors`), so
peft loads and merges it; `low_rank_adapter` writes it from any fine-tuned directory: the
difference of each linear weight to the base, cut by SVD to `rank` (exact for a model trained
with `policy.lora_rank=rank`; an approximation of a fully fine-tuned one, whose fidelity
`benchmarks/warm_adapter.py` measures). Embeddings and norms stay the base's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import torch
from torch import nn

EMBEDDED_WARM = "embedded-warm"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The decoder's linear layers (peft's `all-linear` on a Llama, the LM head excluded)."""


def shipped_adapter() -> Path:
    """The adapter folder inside the installed package."""
    return Path(str(files("searchrl.models") / "warm"))


@dataclass(frozen=True)
class Fidelity:
    """How much of the weight change the rank-r factors keep: the share of the squared
    Frobenius norm of all deltas (1.0: exact)."""

    rank: int
    kept_energy: float
    parameters: int


def _factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """B (out × r), A (r × in) with B @ A the best rank-r approximation of `delta`, and the
    squared norm it keeps."""
    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    b = (u[:, :r] * root).float()
    a = (root[:, None] * vh[:r]).float()
    return b, a, float((s[:r] ** 2).sum())


def low_rank_adapter(base: nn.Module, tuned: nn.Module, rank: int, out: Path) -> Fidelity:
    """Write the peft LoRA adapter (scale 1: lora_alpha = r) whose merge into `base`
    approximates `tuned` on the decoder's linear layers; fp16 factors."""
    from peft import LoraConfig, get_peft_model

    tuned_weights = dict(tuned.named_parameters())
    deltas: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    kept = total = 0.0
    for name, module in base.named_modules():
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS:
            delta = tuned_weights[f"{name}.weight"].detach() - module.weight.detach()
            b, a, energy = _factors(delta, rank)
            deltas[name] = (b, a)
            kept += energy
            total += float(delta.double().pow(2).sum())
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=list(TARGETS), lora_dropout=0.0)
    wrapped = get_peft_model(base, config)
    count = 0
    with torch.no_grad():
        for name, module in wrapped.named_modules():
            key = name.removeprefix("base_model.model.")
            if key in deltas and hasattr(module, "lora_A"):
                b, a = deltas[key]
                module.lora_A["default"].weight.copy_(a)
                module.lora_B["default"].weight.copy_(b)
                count += a.numel() + b.numel()
    for param in wrapped.parameters():
        if param.requires_grad:
            param.data = param.data.half()
    wrapped.save_pretrained(out)
    wrapped.unload()  # leave `base` as it came
    return Fidelity(rank=rank, kept_energy=kept / total if total else 1.0, parameters=count)


def merge_adapter(model: nn.Module, adapter: Path) -> nn.Module:
    """`model` with the adapter merged into its weights: a plain module again, as fast as the
    base and trainable like any loaded model."""
    from peft import PeftModel

    if not (adapter / "adapter_config.json").is_file():
        from searchrl.models.loading import ModelNotFoundError

        raise ModelNotFoundError(f"no LoRA adapter (adapter_config.json) in {adapter}")
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    for name, param in merged.named_parameters():  # peft loads for inference: all frozen
        param.requires_grad_(name in trainable)
    return merged


def adapter_card(adapter: Path) -> dict:
    """What the shipped adapter is (its source, rank and measured scores), from its
    `searchrl_card.json`; empty when there is none."""
    card = adapter / "searchrl_card.json"
    return json.loads(card.read_text()) if card.is_file() else {}
