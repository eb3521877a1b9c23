"""Generation with vLLM (GPU only, the optional `[vllm]` extra), behind the same interface as
the HF backend. vLLM is imported lazily so the package never needs it on CPU machines.

Differences from the HF backend, by vLLM's design: sampling is seeded per request but the
random stream is vLLM's, so HF and vLLM give different samples for the same seed (greedy
outputs should agree up to numerics); `logprobs` are vLLM's sampled-token log-probs of the
model's own distribution (before temperature/top-p). Stop strings are detected by vLLM's
detokenizer; the token ids it returns are kept as they are and the text is re-decoded from
them, so a stop string ending mid-token behaves as in the HF backend.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

from searchrl.models.generation import Generation, SamplingParams, StopReason

VLLM_INSTALL = 'pip install -e ".[vllm]"  (needs an NVIDIA GPU)'


def _whole(tensor: Any) -> Any:
    """A sharded (FSDP DTensor) weight gathered whole (collective), or the tensor itself."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


class VLLMBackend:
    """`GenerationBackend` over a `vllm.LLM` engine."""

    def __init__(self, llm: Any, tokenizer: Any):
        self.llm = llm
        self.tokenizer = tokenizer

    @classmethod
    def create(
        cls,
        model: str,
        tokenizer: Any,
        *,
        tokenizer_dir: str,
        dtype: str,
        gpu_memory_utilization: float,
        max_model_len: int,
    ) -> VLLMBackend:
        """Start an engine on `model` (a hub id, a local dir, or a .gguf file), using the
        tokenizer saved in `tokenizer_dir` (vLLM needs a HF tokenizer on disk for GGUFs)."""
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(f"the vllm backend needs vLLM: {VLLM_INSTALL}") from err
        llm = LLM(
            model=model,
            tokenizer=tokenizer_dir,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=0,
        )
        return cls(llm, tokenizer)

    @classmethod
    def from_module(
        cls,
        module: Any,
        tokenizer: Any,
        *,
        dtype: str,
        gpu_memory_utilization: float,
        max_model_len: int,
    ) -> VLLMBackend:
        """Start an engine on the weights of a transformers module (e.g. the trainer's policy):
        they are saved with the tokenizer to a temporary directory vLLM loads from."""
        directory = tempfile.mkdtemp(prefix="searchrl-vllm-")
        module.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return cls.create(
            directory,
            tokenizer,
            tokenizer_dir=directory,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
        )

    def sync_weights(self, source: Any) -> None:
        """Load the trainer's current weights into the running engine, in place, then drop
        vLLM's prefix cache (its KV blocks were computed with the old weights).

        The weights travel as (HF name, CPU tensor) pairs through `LLM.collective_rpc` to every
        worker, which hands them to its model's `load_weights` (the same loader that reads HF
        checkpoints, so HF parameter names and tied embeddings need no mapping). Copying
        through host memory costs ~2 bytes a parameter each way: seconds for 1-3B models,
        small next to a rollout. Not yet run on a GPU in this project's CI (no GPU there);
        `benchmarks/gpu_check.sh` exercises it where one is available."""
        weights = [
            (name, _whole(tensor.detach()).to("cpu", copy=True))
            for name, tensor in source.state_dict().items()
        ]

        def load(worker: Any) -> int:
            worker.model_runner.model.load_weights(weights=weights)
            return len(weights)

        loaded = self.llm.collective_rpc(load)
        if not loaded or any(count != len(weights) for count in loaded):
            raise RuntimeError(f"vLLM workers loaded {loaded} tensors, expected {len(weights)}")
        self.llm.reset_prefix_cache()

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One vLLM call for the whole batch; vLLM schedules it (continuous batching)."""
        from vllm import SamplingParams as VllmSamplingParams
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
                VllmSamplingParams(
                    n=1,
                    temperature=p.temperature,
                    top_p=p.top_p,
                    max_tokens=p.max_new_tokens,
                    seed=p.seed,
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
        return [r for r in results if r is not None]

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
