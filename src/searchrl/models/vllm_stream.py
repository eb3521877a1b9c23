"""Requests that enter and leave a running vLLM engine one by one (continuous batching across
the turns of multi-turn rollouts, `rollout.streaming`).

`LLM.generate` adds a batch of requests and steps the engine until every one of them is done,
so a multi-turn rollout that generates turn by turn leaves the engine with fewer and fewer
rows while the slowest row of each turn finishes (64 rows became 36, 26, 9, 3 within four
turns of one world rollout). Here requests are added with `LLMEngine.add_request` and the engine is
stepped with `LLMEngine.step` only until some of them finish; the caller hands their next
turns back at once, so the engine keeps every unfinished trajectory in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searchrl.models.generation import SamplingParams


def vllm_params(vllm: Any, params: SamplingParams, *, seeded: bool = False) -> Any:
    """vLLM's sampling parameters for one row: stop strings kept in the output, special
    tokens kept, the sampled token's log-prob returned; with `seeded` (GPUs: the CPU build
    crashes on per-request seeds under chunked prefill, `models.vllm_backend`) the row's own
    seed."""
    seed = {"seed": params.seed} if seeded else {}
    return vllm.SamplingParams(
        n=1,
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_new_tokens,
        stop=list(params.stop),
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        logprobs=0,
        **seed,
    )


def enqueue(
    llm: Any, vllm: Any, key: str, prompt: Sequence[int], params: SamplingParams, *,
    seeded: bool = False,
) -> None:  # fmt: skip
    """Add one row to the engine under the request id `key` (the id its finished output
    carries), without running the engine; `seeded` as in `vllm_params`."""
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    request = vllm_params(vllm, params, seeded=seeded)
    request.output_kind = RequestOutputKind.FINAL_ONLY  # only the finished turn comes back
    llm.llm_engine.add_request(key, TokensPrompt(prompt_token_ids=list(prompt)), request)


def step_until_finished(llm: Any) -> list[Any]:
    """Step the engine until at least one request finishes (or none is left); the finished
    requests' outputs."""
    engine = llm.llm_engine
    while engine.has_unfinished_requests():
        finished = [out for out in engine.step() if out.finished]
        if finished:
            return finished
    return []
