"""models layer: loading policy models (hub, local, GGUF, embedded default) and generation
backends behind one interface (HF transformers; vLLM on GPU)."""

from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.models.hf_backend import HFBackend
from searchrl.models.loading import (
    LoadedModel,
    Policy,
    load_model,
    load_policy,
    load_tokenizer,
    tiny_model,
)

__all__ = [
    "Generation",
    "GenerationBackend",
    "HFBackend",
    "LoadedModel",
    "Policy",
    "SamplingParams",
    "load_model",
    "load_policy",
    "load_tokenizer",
    "tiny_model",
]
