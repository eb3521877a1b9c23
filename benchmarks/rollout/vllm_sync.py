"""Weight sync into a running vLLM engine (CPU or GPU), in memory, against restarting it, on a
real model: change every parameter, `sync_weights`, check the engine's greedy continuation
follows, three times (the 2nd sync restores the original weights, so its continuation must be
the original one); an unchanged model is not synced again. Then the same with the engine in
its own processes (the shared RAM buffer), and a restart of each. Seconds are wall time; the
last column is the sync's rate in GB of engine-dtype weights per second, from which the
table extrapolates a sync at 3B and 7B parameters (bf16) for the same machine.

    python benchmarks/rollout/vllm_sync.py MODEL_DIR [--dtype bfloat16] [--modes same,separate]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace


def measure(path: str, mode: str, dtype: str) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from searchrl.config.model import ModelConfig
    from searchrl.models.generation import SamplingParams
    from searchrl.models.vllm_backend import VLLMBackend

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    config = replace(ModelConfig(vllm_kv_cache_gib=1.0), vllm_process=mode)  # type: ignore[arg-type]
    started = time.perf_counter()
    engine = VLLMBackend.from_module(model, tokenizer, config, dtype=dtype, max_model_len=2048)
    start_s = time.perf_counter() - started
    prompt = [tokenizer.encode("The capital of France is")]
    greedy = [SamplingParams(max_new_tokens=16, temperature=0.0)]
    original = engine.generate(prompt, greedy)[0].token_ids
    syncs, outcomes = [], []
    for _ in range(3):
        with torch.no_grad():
            for param in model.parameters():
                param.mul_(-1.0)  # every parameter, norms included
        assert engine.sync_weights(model)
        syncs.append(engine.last_sync_s)
        outcomes.append(engine.generate(prompt, greedy)[0].token_ids == original)
    assert not engine.sync_weights(model)  # unchanged: nothing to do
    assert outcomes == [False, True, False], outcomes
    engine.close()
    started = time.perf_counter()
    VLLMBackend.from_module(model, tokenizer, config, dtype=dtype, max_model_len=2048).close()
    restart_s = time.perf_counter() - started
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    gigabytes = sum(t.numel() for t in model.state_dict().values()) * size / 1e9
    sync_s = sorted(syncs)[1]
    return {"start_s": start_s, "sync_s": sync_s, "restart_s": restart_s, "gb": gigabytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--modes", default="same,separate")
    args = parser.parse_args()
    print("| engine | start s | sync s (median of 3) | restart s | GB/s | 3B sync s | 7B sync s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        r = measure(args.model, mode, args.dtype)
        rate = r["gb"] / r["sync_s"]
        per_param = 2 if args.dtype != "float32" else 4
        on_paper = [n * per_param / rate for n in (3.0, 7.0)]  # GB at n billion params / rate
        print(
            f"| {mode} process | {r['start_s']:.1f} | {r['sync_s']:.2f} | {r['restart_s']:.1f} "
            f"| {rate:.2f} | {on_paper[0]:.0f} | {on_paper[1]:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
