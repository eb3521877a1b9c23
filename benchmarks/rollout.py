"""Rollout throughput on this machine: plain batched generation vs full multi-turn rollouts
with BM25 search, same model, batch and per-turn length, measured in one run.

(a) plain: one `generate` call over the batch, no tools, `(turns + 1) × length` new tokens a row.
(b) rollout: `run_rollouts` as training uses it. The untrained model rarely writes a tag, so
    most turns are invalid actions answered with the corrective feedback: multi-turn, but with
    few searches.
(c) forced search: as (b), but every turn that ends without an action gets
    ` <search> <question words> </search>` appended to what the model wrote, so each turn runs
    a real BM25 search and inserts real passages (the costly path of a trained policy).

"generated tokens/s" counts tokens the model sampled; "all tokens/s" counts every token of the
final sequences (prompt, generated, inserted), each of which the model processed once (twice
or more without the prefix cache). The ceiling is the measured matmul FLOP/s at the decode
shape divided by 2 × parameters FLOPs per token.

    python benchmarks/rollout.py --questions 16 --length 32 --turns 2 --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from searchrl.config.data import world_preset
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.world import generate_world
from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.models.loading import load_policy
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.loop import run_rollouts
from searchrl.rollout.parse import parse_action
from searchrl.rollout.sampler import encode_prompt, render_prompt
from searchrl.types import Hit, Question


class Timed:
    """Wraps a backend and a retriever to add up the wall time spent inside each."""

    def __init__(self, backend: GenerationBackend, retriever: Retriever):
        self.backend, self.retriever = backend, retriever
        self.generate_s = self.search_s = 0.0

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        started = time.perf_counter()
        outputs = self.backend.generate(prompts, params)
        self.generate_s += time.perf_counter() - started
        return outputs

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        started = time.perf_counter()
        hits = self.retriever.search(queries, k)
        self.search_s += time.perf_counter() - started
        return hits


class ForcedSearch:
    """Appends a search for the question's words to every turn that has no action."""

    def __init__(self, backend: GenerationBackend, tokenizer, questions: list[Question]):
        self.backend, self.tokenizer = backend, tokenizer
        self.queries = {q.question: " ".join(q.question.split()[:8]) for q in questions}
        self.forced_tokens = 0
        """Tokens appended by this wrapper: not generated, so not counted as throughput."""

    def generate(self, prompts, params) -> list[Generation]:
        outputs = []
        for prompt, out in zip(prompts, self.backend.generate(prompts, params), strict=True):
            if parse_action(out.text).kind != "invalid":
                outputs.append(out)
                continue
            context = self.tokenizer.decode(list(prompt))
            query = next(q for k, q in self.queries.items() if k in context)
            forced = self.tokenizer.encode(f" <search> {query} </search>", add_special_tokens=False)
            self.forced_tokens += len(forced)
            ids = out.token_ids + forced
            text = self.tokenizer.decode(ids)
            outputs.append(Generation(ids, [0.0] * len(ids), text, "stop", "</search>"))
        return outputs


def matmul_gflops(hidden: int, rows: int, dtype: torch.dtype) -> float:
    """GFLOP/s of a [rows, hidden] × [hidden, 4·hidden] matmul (the decode-step shape), best of
    five trials: other processes on the machine can only make a trial slower."""
    a, w = torch.randn(rows, hidden, dtype=dtype), torch.randn(hidden, 4 * hidden, dtype=dtype)
    for _ in range(3):
        a @ w
    best, repeats = 0.0, 50
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            a @ w
        seconds = time.perf_counter() - started
        best = max(best, 2 * rows * hidden * 4 * hidden * repeats / seconds / 1e9)
    return best


def measure(name: str, policy, retriever, questions, config: RolloutConfig) -> dict:
    timed = Timed(policy.backend, retriever)
    forcing = ForcedSearch(timed, policy.tokenizer, questions) if name == "forced search" else None
    started = time.perf_counter()
    trajs = run_rollouts(forcing or timed, policy.tokenizer, timed, questions, config, seed=0)
    wall = time.perf_counter() - started
    forced = forcing.forced_tokens if forcing else 0
    tokens = sum(t.stats.policy_tokens for t in trajs) - forced
    context = sum(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    return {
        "name": name,
        "tokens": tokens,
        "processed_s": context / wall,
        "wall": wall,
        "tok_s": tokens / wall,
        "retrieval_share": timed.search_s / wall,
        "searches": sum(t.stats.searches for t in trajs) / len(trajs),
        "turns": sum(t.stats.turns for t in trajs) / len(trajs),
        "env_tokens": sum(t.stats.env_tokens for t in trajs) / len(trajs),
    }


def plain(policy, questions, config: RolloutConfig, new_tokens: int) -> dict:
    prompts = [
        encode_prompt(policy.tokenizer, render_prompt(policy.tokenizer, q.question, True), True)
        for q in questions
    ]
    params = [SamplingParams(max_new_tokens=new_tokens, seed=i) for i in range(len(prompts))]
    started = time.perf_counter()
    outputs = policy.backend.generate(prompts, params)
    wall = time.perf_counter() - started
    tokens = sum(len(o.token_ids) for o in outputs)
    context = tokens + sum(len(p) for p in prompts)
    return {
        "name": "plain generate",
        "tokens": tokens,
        "wall": wall,
        "tok_s": tokens / wall,
        "processed_s": context / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--length", type=int, default=32, help="max new tokens per turn")
    parser.add_argument("--turns", type=int, default=2, help="max_turns (B)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--generation-dtype", default="auto")
    parser.add_argument("--no-prefix-cache", action="store_true", help="re-prefill every turn")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    world = generate_world(world_preset("demo"))
    retriever = BM25Retriever.build(world.documents)
    questions = world.questions["test"][: args.questions]
    model_config = ModelConfig(
        name_or_path=args.model,
        generation_dtype=args.generation_dtype,
        generation_batch_size=args.questions,
        prefix_cache=not args.no_prefix_cache,
    )
    started = time.perf_counter()
    policy = load_policy(model_config, max_model_len=4096)
    print(
        f"model loaded in {time.perf_counter() - started:.0f} s; threads {args.threads}; "
        f"prefix cache {model_config.prefix_cache}; generation dtype {args.generation_dtype}"
    )
    config = RolloutConfig(max_turns=args.turns, max_response_tokens=args.length)
    rows = [plain(policy, questions, config, args.length * (args.turns + 1))]
    rows.append(measure("rollout", policy, retriever, questions, config))
    rows.append(measure("forced search", policy, retriever, questions, config))

    params = sum(p.numel() for p in policy.model.parameters())
    hidden = policy.model.config.hidden_size
    gflops = matmul_gflops(hidden, args.questions, next(policy.model.parameters()).dtype)
    ceiling = gflops * 1e9 / (2 * params)
    shape = f"[{args.questions}×{hidden}]·[{hidden}×{4 * hidden}]"
    print(f"\n{params / 1e6:.0f}M params; matmul {gflops:.1f} GFLOP/s at {shape}")
    print(f"ceiling {ceiling:.0f} tokens/s; plain reaches {rows[0]['tok_s'] / ceiling:.0%} of it\n")
    print(
        "| run | generated tokens | wall s | generated tokens/s | vs plain | all tokens/s "
        "| retrieval share | searches | turns | env tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["tok_s"] / rows[0]["tok_s"]
        extra = (
            f"{row['retrieval_share']:.1%} | {row['searches']:.2f} | {row['turns']:.2f} | "
            f"{row['env_tokens']:.0f}"
            if "turns" in row
            else "- | - | - | -"
        )
        print(
            f"| {row['name']} | {row['tokens']} | {row['wall']:.1f} | {row['tok_s']:.1f} | "
            f"{ratio:.2f} | {row['processed_s']:.0f} | {extra} |"
        )


if __name__ == "__main__":
    main()
