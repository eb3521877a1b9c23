"""Generation with a transformers model: our own batched sampling loop over the KV cache.

Why not `model.generate`: a row must stop the moment it completes `</search>` or `</answer>`,
finished rows must stop costing compute, and each row samples from its own seeded generator.
So prompts are left-padded into one batch, prefilled once, then decoded one token at a time;
when rows finish they are dropped from the batch and from the KV cache.

The trainer passes its live policy module. With `generation_dtype` set (e.g. bfloat16 on CPU,
where bf16 matmuls are ~1.5-2x faster) the backend generates with a converted copy that
`sync_weights` refreshes from the policy before each rollout.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from searchrl.models.generation import (
    Generation,
    SamplingParams,
    StopChecker,
    eos_token_ids,
    sample_tokens,
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
    ):
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.generation_dtype = generation_dtype
        self.model = model
        self.set_model(model)

    def set_model(self, model: PreTrainedModel) -> None:
        """Generate with `model` from now on (converted to `generation_dtype` if one is set;
        the conversion is a copy, the caller's module is never modified)."""
        self.model = model
        converted = self.generation_dtype is not None and model.dtype != self.generation_dtype
        self._runner = copy.deepcopy(model).to(self.generation_dtype) if converted else model
        self._runner.eval()
        self._eos_ids = eos_token_ids(self.tokenizer, model)
        self._pad_id = self._pick_pad_id()
        # transformers 5 renamed `past_key_values` to `cache`; older releases only know the former.
        forward_args = inspect.signature(self._runner.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_args else "past_key_values"

    def sync_weights(self, source: torch.nn.Module | None = None) -> None:
        """Copy the weights of `source` (default: the model given to `set_model`) into the
        generation copy; a no-op when generating with the model itself."""
        source = self.model if source is None else source
        if self._runner is source:
            return
        with torch.no_grad():
            self._runner.load_state_dict(source.state_dict())

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
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start : start + self.max_batch_size]
            outputs = self._generate_batch([prompts[i] for i in chunk], [params[i] for i in chunk])
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

    @torch.no_grad()
    def _generate_batch(
        self, prompts: list[Sequence[int]], params: list[SamplingParams]
    ) -> list[Generation]:
        rows = len(prompts)
        device = self.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((rows, width), self._pad_id, dtype=torch.long)
        attention = torch.zeros((rows, width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            if prompt:
                input_ids[i, width - len(prompt) :] = torch.tensor(list(prompt))
                attention[i, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        generators = [torch.Generator().manual_seed(p.seed) for p in params]
        checkers = [StopChecker(self._decode, self._eos_ids, p) for p in params]
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        results: list[Generation | None] = [None] * rows
        for i, p in enumerate(params):
            if p.max_new_tokens <= 0:
                results[i] = Generation([], [], "", "length")
        active = [i for i in range(rows) if results[i] is None]
        cache = DynamicCache()
        if active and len(active) < rows:
            input_ids, attention = input_ids[active], attention[active]
        step_ids = input_ids
        while active:
            positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
            logits = self._runner(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=positions,
                **{self._cache_kwarg: cache},
                use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1]
            next_ids, next_lps = sample_tokens(
                logits, [params[i] for i in active], [generators[i] for i in active]
            )
            keep = []
            for j, i in enumerate(active):
                tokens[i].append(int(next_ids[j]))
                logprobs[i].append(float(next_lps[j]))
                stopped = checkers[i].check(tokens[i])
                if stopped is None:
                    keep.append(j)
                else:
                    text = self._decode(tokens[i])
                    results[i] = Generation(tokens[i], logprobs[i], text, *stopped)
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(index)
                attention, next_ids = attention[index], next_ids[index]
            active = [active[j] for j in keep]
            step_ids = next_ids[:, None]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
        return [r for r in results if r is not None]
