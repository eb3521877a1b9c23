"""Every method `searchrl eval --method` knows, by name.

Adding a method is one function `(questions, ctx) ->
list[Outcome]` and one `MethodSpec` line below.

`direct-ft` and `rag-ft` run the Direct and RAG prompts with a model fine-tuned on them
(`searchrl sft source=direct|rag`, the same references and budget as the search policy's warm
start), so "Search-R1 > RAG > Direct" compares methods, not who learned the answer format.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from searchrl.eval.agents import run_ircot, run_search_o1
from searchrl.eval.methods import (
    RunFn,
    StreamFn,
    policy_method,
    policy_stream,
    run_cot,
    run_direct,
    run_rag,
    run_search_r2,
)


@dataclass(frozen=True)
class MethodSpec:
    """A registered method."""

    name: str
    run: RunFn
    retrieval: bool
    """Needs `--index` or `--url`."""
    trained: bool
    """Evaluates a trained policy, so `--model` must be given explicitly."""
    description: str
    stream: StreamFn | None = None
    """Run with a fixed number of questions in flight instead of batch by batch (the
    multi-turn policies: one long trajectory would hold its batch)."""


_SEARCHING = policy_method(search=True)
_STREAMING = policy_stream(search=True)

METHODS = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            MethodSpec("direct", run_direct, False, False, "direct answer, no retrieval"),
            MethodSpec("cot", run_cot, False, False, "chain of thought, no retrieval"),
            MethodSpec("rag", run_rag, True, False, "top-k passages for the question, one turn"),
            MethodSpec("ircot", run_ircot, True, False, "retrieval interleaved with CoT lines"),
            MethodSpec("search-o1", run_search_o1, True, False, "agentic search, Reason-in-Docs"),
            MethodSpec(
                "direct-ft", run_direct, False, True, "Direct, fine-tuned (question → answer)"
            ),
            MethodSpec(
                "rag-ft", run_rag, True, True, "RAG, fine-tuned (question + passages → answer)"
            ),
            MethodSpec("r1", policy_method(search=False), False, True, "RL-trained, no search"),
            MethodSpec("sft", _SEARCHING, True, True, "SFT policy with search", _STREAMING),
            MethodSpec(
                "rejection", _SEARCHING, True, True, "rejection-sampling SFT policy", _STREAMING
            ),
            MethodSpec(
                "search-r1", _SEARCHING, True, True, "RL-trained policy with search", _STREAMING
            ),
            MethodSpec("search-r2", run_search_r2, True, True, "policy + Meta-Refiner (refiner.*)"),
        )
    }
)
"""Name → method, in the order of the papers' tables."""


def method(name: str) -> MethodSpec:
    """The registered method called `name`."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]
