"""Scoring fixed answers on a vLLM engine: the log-probability of each candidate token
sequence after its prompt, what the Meta-Refiner's reading needs ("0", "1", …, "T", each with
its end-of-turn).

Each context (a prompt, or a prompt plus the first tokens of a candidate) is one request of
one token that returns the log-probs of just the tokens scored there (`logprob_token_ids`,
under temperature 1 and no top-p, so the model's own). The bare prompts go first, so that the
contexts past them (a candidate's first token, for its end-of-turn) find the prompt's KV
blocks in the prefix cache and prefill only what lies past the last full block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searchrl.models.vllm_compat import import_vllm, token_logprob_params

Context = tuple[int, tuple[int, ...]]
"""A prompt's row and the candidate tokens already written after it."""


def candidate_logprobs(
    llm: Any, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]]
) -> list[list[float]]:
    """log P(candidate | prompt), summed over the candidate's tokens, for every candidate of
    every prompt (`candidates[i]` belongs to `prompts[i]`), on the `vllm.LLM` `llm`."""
    wanted: dict[Context, set[int]] = {}
    for row, cands in enumerate(candidates):
        for cand in cands:
            for j, token in enumerate(cand):
                wanted.setdefault((row, tuple(cand[:j])), set()).add(int(token))
    found: dict[Context, dict[int, float]] = {}
    for wave in ([k for k in wanted if not k[1]], [k for k in wanted if k[1]]):
        found.update(_next_token_logprobs(llm, prompts, wave, wanted))
    return [
        [sum(found[(row, tuple(c[:j]))][int(c[j])] for j in range(len(c))) for c in cands]
        for row, cands in enumerate(candidates)
    ]


def _next_token_logprobs(
    llm: Any,
    prompts: Sequence[Sequence[int]],
    keys: list[Context],
    wanted: dict[Context, set[int]],
) -> dict[Context, dict[int, float]]:
    """One engine call: for each context, the log-probs of its wanted next tokens."""
    if not keys:
        return {}
    vllm = import_vllm()
    requests = [vllm.TokensPrompt(prompt_token_ids=[*prompts[row], *tail]) for row, tail in keys]
    params = [token_logprob_params(vllm, sorted(wanted[key])) for key in keys]
    outputs = llm.generate(requests, params, use_tqdm=False)
    return {
        key: {t: float(output.outputs[0].logprobs[0][t].logprob) for t in wanted[key]}
        for key, output in zip(keys, outputs, strict=True)
    }
