"""The HF backend decoding one row alone with a long context (the last row of a batch, often
thousands of tokens long): median seconds per decode step at several context lengths, and
tokens/s, for the tree this script is imported from. Run it against another tree by putting
that tree's `src` first on PYTHONPATH (the "before" of a change):

    python benchmarks/rollout/hf_long_row.py --model S/model --contexts 200,1000,2500
    PYTHONPATH=/path/to/old/src python benchmarks/rollout/hf_long_row.py --model S/model

A row keeps the padding it had next to longer prompts; `--padded` starts the row next to one
300 tokens longer that finishes at once, as in a rollout whose longest row ends first.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--contexts", default="200,1000,2500")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--dtype", default="float32", help="generation dtype of the HF backend")
    parser.add_argument("--padded", action="store_true")
    args = parser.parse_args()

    import torch

    import searchrl
    from searchrl.config.model import ModelConfig
    from searchrl.models.generation import SamplingParams
    from searchrl.models.hf_backend import HFBackend
    from searchrl.models.loading import load_model

    loaded = load_model(ModelConfig(name_or_path=args.model, dtype="float32"))
    dtype = None if args.dtype == "float32" else getattr(torch, args.dtype)
    backend = HFBackend(loaded.model, loaded.tokenizer, max_batch_size=32, generation_dtype=dtype)
    steps: list[float] = []
    forward = backend._forward

    def timed(step_ids, attention, cache):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        out = forward(step_ids, attention, cache)
        if step_ids.shape[1] == 1 and step_ids.shape[0] == 1:
            steps.append(time.perf_counter() - started)
        return out

    backend._forward = timed  # type: ignore[method-assign]
    text = "The history of the river and the people who lived along it. " * 400
    base = loaded.tokenizer.encode(text)
    print(f"searchrl from {searchrl.__file__}; {torch.get_num_threads()} threads")
    print("| context tokens | decode step ms (median) | tokens/s |\n|---:|---:|---:|")
    for n in map(int, args.contexts.split(",")):
        steps.clear()
        prompts = [base[:n]] + ([base[: n + 300]] if args.padded else [])
        params = [SamplingParams(max_new_tokens=args.steps, temperature=1.0, seed=1)]
        params += [SamplingParams(max_new_tokens=1, temperature=1.0, seed=2)] * args.padded
        backend.generate(prompts, params)
        step = statistics.median(steps)
        print(f"| {n} | {1000 * step:.1f} | {1 / step:.1f} |", flush=True)


if __name__ == "__main__":
    main()
