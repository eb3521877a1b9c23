"""Generation with a transformers model: our own batched sampling loop over the KV cache.

Why not `model.generate`: a row must stop the moment it completes `</search>` or `</answer>`,
finished rows must stop costing compute, and each row samples from its own seeded generator.
So prompts are left-padded into one batch, prefilled once (minus any prefix whose KV cache
a previous turn left, see `kv_prefix`), then decoded one token at a time; when rows finish they
are dropped from the batch and from the KV cache.

The trainer passes its live policy module. With `generation_dtype` set, the backend generates
with a converted copy that `sync_weights` refreshes from the policy before each rollout. Only
worth it where the hardware has fast low-precision matmuls (GPUs, CPUs with AMX/AVX512-BF16):
on the AVX2-only CPUs of our dev machines a bf16 matmul is ~30x slower than fp32.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models.generation import (
    DecodeFn,
    Generation,
    SamplingParams,
    StopChecker,
    eos_token_ids,
    sample_tokens,
)
from searchrl.models.kv_prefix import (
    PrefixEntry,
    PrefixStore,
    build_batch,
    drop_padding,
    extract,
)


class HFBackend:
    """`GenerationBackend` over a transformers causal LM (CPU or GPU)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int,
        generation_dtype: torch.dtype | None = None,
        prefix_cache: bool = ModelConfig.prefix_cache,
    ):
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.generation_dtype = generation_dtype
        self.prefix_cache = prefix_cache
        self._prefixes = PrefixStore()
        self.model = model
        self.set_model(model)

    def set_model(self, model: PreTrainedModel) -> None:
        """Generate with `model` from now on (converted to `generation_dtype` if one is set;
        the conversion is a copy, the caller's module is never modified)."""
        self.model = model
        converted = self.generation_dtype is not None and model.dtype != self.generation_dtype
        self._runner = copy.deepcopy(model).to(self.generation_dtype) if converted else model
        if converted:  # our own copy; the caller's module keeps its train/eval mode
            self._runner.eval()
        self._prefixes.clear()
        self.synced_version: Any = None
        """Which weights the generation copy holds (`sync_weights`); None: not recorded."""
        self._eos_ids = eos_token_ids(self.tokenizer, model)
        self._pad_id = self._pick_pad_id()
        # transformers 5 renamed `past_key_values` to `cache`; older releases only know the former.
        forward_args = inspect.signature(self._runner.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_args else "past_key_values"

    @property
    def owns_weights(self) -> bool:
        """Whether generation runs on a copy (not the module given to `set_model`), so the
        module may be updated while this backend generates."""
        return self._runner is not self.model

    def sync_weights(self, source: Any = None, version: int | None = None) -> bool:
        """Copy the weights of `source` (default: the model given to `set_model`) into the
        generation copy; a no-op when generating with the model itself. `version` (see
        `models.weights.weights_version`) records which weights the copy holds. Returns
        whether a copy was made."""
        source = self.model if source is None else source
        self._prefixes.clear()
        self.synced_version = version
        if self._runner is source:
            return False
        with torch.no_grad():
            self._runner.load_state_dict(source.state_dict())
        return True

    def release(self) -> None:
        """Nothing to hand back: the copy lives with the trainer (`WeightSyncable`)."""

    def clear_cache(self) -> None:
        """Drop the KV kept for continuing sequences (it is also dropped on weight changes and
        whenever a call does not reuse it)."""
        self._prefixes.clear()

    @property
    def device(self) -> torch.device:
        """Where generation runs."""
        return next(self._runner.parameters()).device

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """Generate for every prompt; longest prompts are batched together to limit padding."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        found = self._prefixes.take(prompts)
        prefixes = found if self.prefix_cache else [None] * len(prompts)
        results: list[Generation | None] = [
            Generation([], [], "", "length") if p.max_new_tokens <= 0 else None for p in params
        ]
        todo = [i for i, r in enumerate(results) if r is None]
        todo.sort(key=lambda i: -len(prompts[i]))
        with _eval_mode(self._runner):
            for start in range(0, len(todo), self.max_batch_size):
                chunk = todo[start : start + self.max_batch_size]
                outputs = self._generate_batch(
                    [prompts[i] for i in chunk],
                    [params[i] for i in chunk],
                    [prefixes[i] for i in chunk],
                )
                for i, output in zip(chunk, outputs, strict=True):
                    results[i] = output
        return [r for r in results if r is not None]

    def _pick_pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = min(self._eos_ids) if self._eos_ids else 0
        return int(pad)

    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def _forward(
        self, step_ids: torch.Tensor, attention: torch.Tensor, cache: DynamicCache
    ) -> torch.Tensor:
        """Logits of the next token ([rows, vocab]) after feeding `step_ids` ([rows, new]).
        Without padding the mask is left out: attention then runs without one, and with
        grouped keys and values as they are (a mask makes transformers repeat them per query
        head first)."""
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
        return self._runner(
            input_ids=step_ids,
            attention_mask=None if bool(attention.all()) else attention,
            position_ids=positions,
            **{self._cache_kwarg: cache},
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

    @torch.no_grad()
    def _generate_batch(
        self,
        prompts: list[Sequence[int]],
        params: list[SamplingParams],
        prefixes: list[PrefixEntry | None],
    ) -> list[Generation]:
        """Prefill (what the prefixes do not cover) once, then decode token by token; finished
        rows leave the batch and the KV cache at once, so they cost nothing more."""
        rows = [_RowState(self._decode, self._eos_ids, p) for p in params]
        step_ids, attention, cache = build_batch(prompts, prefixes, self._pad_id, self.device)
        active = list(range(len(rows)))
        while active:
            logits = self._forward(step_ids, attention, cache)
            next_ids, next_lps = sample_tokens(
                logits, [params[i] for i in active], [rows[i].generator for i in active]
            )
            keep = []
            for j, i in enumerate(active):
                if not rows[i].push(int(next_ids[j]), float(next_lps[j])):
                    keep.append(j)
                elif self.prefix_cache and params[i].continues:
                    seen = [*prompts[i], *rows[i].tokens[:-1]]
                    self._prefixes.add(extract(cache, j, attention, seen))
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=attention.device)
                cache.batch_select_indices(index)
                attention, next_ids = attention[index], next_ids[index]
                attention = drop_padding(cache, attention)
            active = [active[j] for j in keep]
            step_ids = next_ids[:, None]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
        return [row.finished() for row in rows]


@contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) while generating, then the mode the module had: when the runner
    is the trainer's live policy, generation must not leave it in eval mode (gradient
    checkpointing and dropout only act in training mode)."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


class _RowState:
    """One sequence being decoded: its generator, stop checker and output so far."""

    def __init__(self, decode: DecodeFn, eos_ids: frozenset[int], params: SamplingParams):
        self._decode = decode
        self.generator = torch.Generator().manual_seed(params.seed)
        self._checker = StopChecker(decode, eos_ids, params)
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.result: Generation | None = None

    def push(self, token: int, logprob: float) -> bool:
        """Add a sampled token; True when the row is finished."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        stopped = self._checker.check(self.tokens)
        if stopped is not None:
            self.result = Generation(
                self.tokens, self.logprobs, self._decode(self.tokens), *stopped
            )
        return stopped is not None

    def finished(self) -> Generation:
        if self.result is None:
            raise RuntimeError("row still running")
        return self.result
