"""Generation engines side by side on this machine, then rollout throughput, in one run.

Part 1, engines: the same Search-R1 prompts (world questions), greedy, `--new` tokens a row, at
batch 1, 4, 16 and 32, for each engine: the HF backend as it is (fp32), its bf16 generation
copy (only where the CPU has native bf16: detected at run time, otherwise skipped because
emulated bf16 is tens of times slower), `torch.compile` of the HF model (`--compile`), and
vLLM in fp32 where it is installed. "decode steps/s" counts the steps of the longest row; the wall
time includes prefill. Weight sync: seconds to push the trainer's module into each engine.

Part 2, rollouts with each engine of `--rollout-engines`:
(a) plain: one `generate` call over the batch, no tools, `(turns + 1) × length` new tokens a row.
(b) rollout: `run_rollouts` as training uses it. The untrained model rarely writes a tag, so
    most turns are invalid actions answered with the corrective feedback: multi-turn, but with
    few searches.
(c) forced search: as (b), but every turn that ends without an action gets
    ` <search> <question words> </search>` appended to what the model wrote, so each turn runs
    a real BM25 search and inserts real passages (the costly path of a trained policy).

"generated tokens/s" counts tokens the model sampled; "all tokens/s" counts every token of the
final sequences (prompt, generated, inserted).

    taskset -c 1 python benchmarks/rollout/rollout.py --threads 1 --new 64 --length 64 --turns 2
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable, Sequence

import torch

from searchrl.config.data import world_preset
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.world import generate_world
from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.models.hf_backend import HFBackend
from searchrl.models.loading import Policy, load_model
from searchrl.models.precision import cpu_has_fast_bf16
from searchrl.models.vllm_backend import VLLMBackend, vllm_available
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.loop import run_rollouts
from searchrl.rollout.parse import parse_action
from searchrl.rollout.sampler import encode_prompt, render_prompt
from searchrl.types import Hit, Question

BATCHES = (1, 4, 16, 32)


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


def measure(name: str, policy, retriever, questions, config: RolloutConfig) -> dict:
    timed = Timed(policy.backend, retriever)
    forcing = ForcedSearch(timed, policy.tokenizer, questions) if name == "forced search" else None
    started, cpu = time.perf_counter(), time.process_time()
    trajs = run_rollouts(forcing or timed, policy.tokenizer, timed, questions, config, seed=0)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    forced = forcing.forced_tokens if forcing else 0
    tokens = sum(t.stats.policy_tokens for t in trajs) - forced
    context = sum(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    return {
        "name": name,
        "tokens": tokens,
        "processed_s": context / wall,
        "wall": wall,
        "tok_s": tokens / wall,
        "tok_cpu_s": tokens / cpu,
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
    started, cpu = time.perf_counter(), time.process_time()
    outputs = policy.backend.generate(prompts, params)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    tokens = sum(len(o.token_ids) for o in outputs)
    context = tokens + sum(len(p) for p in prompts)
    return {
        "name": "plain generate",
        "tokens": tokens,
        "wall": wall,
        "tok_s": tokens / wall,
        "tok_cpu_s": tokens / cpu,
        "processed_s": context / wall,
    }


def engines(model, tokenizer, compile_hf: bool) -> dict[str, Callable[[], GenerationBackend]]:
    """Name → constructor of every engine this machine can run, built on the same module."""
    table: dict[str, Callable[[], GenerationBackend]] = {
        "hf fp32": lambda: HFBackend(model, tokenizer, max_batch_size=32),
    }
    if vllm_available():
        table["vllm fp32"] = lambda: VLLMBackend.from_module(
            model, tokenizer, ModelConfig(), dtype="float32", max_model_len=4096
        )
    if cpu_has_fast_bf16():
        table["hf bf16 copy"] = lambda: HFBackend(
            model, tokenizer, max_batch_size=32, generation_dtype=torch.bfloat16
        )
    if compile_hf:
        compiled = copy.deepcopy(model)
        compiled.forward = torch.compile(compiled.forward, dynamic=True)
        table["hf fp32 + torch.compile"] = lambda: HFBackend(compiled, tokenizer, max_batch_size=32)
    return table


def engine_table(backends: dict[str, GenerationBackend], prompts, new_tokens: int) -> None:
    """tokens/s and decode steps/s of each engine at each batch size (same prompts)."""
    rates: dict[tuple[str, int], tuple[float, float]] = {}
    for batch in BATCHES:
        params = [SamplingParams(max_new_tokens=new_tokens, temperature=0.0)] * batch
        for name, backend in backends.items():
            backend.generate(prompts[:1], params[:1])  # warm-up (first call allocates)
            started, cpu = time.perf_counter(), time.process_time()
            outputs = backend.generate(prompts[:batch], params)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            tokens = sum(len(o.token_ids) for o in outputs)
            steps = max(len(o.token_ids) for o in outputs)
            rates[name, batch] = (tokens / wall, steps / wall, tokens / cpu, steps / cpu)
            print(f"  {name} batch {batch}: {tokens / wall:.1f} tokens/s", flush=True)
    for label, offset in (("wall second", 0), ("CPU second of this process", 2)):
        print(f"\nper {label}:\n")
        print("| engine | " + " | ".join(f"batch {b} tok/s (steps/s)" for b in BATCHES)
              + " | batch 1 vs hf fp32 | batch 16 vs hf fp32 |")  # fmt: skip
        print("|---|" + "---:|" * (len(BATCHES) + 2))
        for name in backends:
            row = [rates[name, b][offset : offset + 2] for b in BATCHES]
            cells = [f"{tok:.1f} ({steps:.2f})" for tok, steps in row]
            ratios = [rates[name, b][offset] / rates["hf fp32", b][offset] for b in (1, 16)]
            print(f"| {name} | " + " | ".join(cells) + f" | {ratios[0]:.2f} | {ratios[1]:.2f} |")


def sync_table(backends: dict[str, GenerationBackend], model) -> None:
    """Seconds to push the module's current weights into each engine (median of 3)."""
    print("\n| engine | weight sync s |\n|---|---:|")
    for name, backend in backends.items():
        times = []
        for _ in range(3):
            with torch.no_grad():  # a changed weight: an unchanged model is not synced again
                next(model.parameters()).add_(0.0)
            started = time.perf_counter()
            backend.sync_weights(model)  # type: ignore[attr-defined]
            times.append(time.perf_counter() - started)
        print(f"| {name} | {sorted(times)[1]:.2f} |")


def rollout_table(policy: Policy, retriever, questions, config: RolloutConfig, length: int) -> None:
    rows = [plain(policy, questions, config, length * (config.max_turns + 1))]
    rows.append(measure("rollout", policy, retriever, questions, config))
    rows.append(measure("forced search", policy, retriever, questions, config))
    print(
        "| run | generated tokens | wall s | generated tokens/s | per CPU s | vs plain "
        "| all tokens/s | retrieval share | searches | turns | env tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
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
            f"{row['tok_cpu_s']:.1f} | {ratio:.2f} | {row['processed_s']:.0f} | {extra} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--questions", type=int, default=16, help="rollout batch")
    parser.add_argument("--new", type=int, default=64, help="new tokens a row, engine table")
    parser.add_argument("--length", type=int, default=64, help="max new tokens per turn")
    parser.add_argument("--turns", type=int, default=2, help="max_turns (B)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also torch.compile the HF model")
    parser.add_argument("--skip-engines", action="store_true")
    parser.add_argument("--rollout-engines", default="hf fp32,vllm fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    world = generate_world(world_preset("demo"))
    retriever = BM25Retriever.build(world.documents)
    loaded = load_model(ModelConfig(name_or_path=args.model))
    model, tokenizer = loaded.model, loaded.tokenizer
    print(f"threads {args.threads}; native bf16: {cpu_has_fast_bf16()}")
    questions = world.questions["test"][: max(max(BATCHES), args.questions)]
    prompts = [
        encode_prompt(tokenizer, render_prompt(tokenizer, q.question, True), True)
        for q in questions
    ]
    built = {name: make() for name, make in engines(model, tokenizer, args.compile).items()}
    if not args.skip_engines:
        engine_table(built, prompts, args.new)
        sync_table({k: v for k, v in built.items() if k.startswith("vllm")}, model)
    config = RolloutConfig(max_turns=args.turns, max_response_tokens=args.length)
    for name in args.rollout_engines.split(","):
        print(f"\nrollouts with {name}: {args.questions} questions, {args.length} tokens a turn")
        policy = Policy(backend=built[name], tokenizer=tokenizer, model=model)
        rollout_table(policy, retriever, questions[: args.questions], config, args.length)


if __name__ == "__main__":
    main()
