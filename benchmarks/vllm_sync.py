"""Weight sync into a running vLLM engine (CPU or GPU) against restarting it, on a real model:
flip the sign of every MLP weight, `sync_weights`, greedy-decode; three times (the 2nd sync
restores the original weights, so its continuation must be the original one), then time a
restart of the eager engine. Seconds are wall and CPU (every process of the engine).

    nice -n 19 python benchmarks/vllm_sync.py MODEL_DIR
"""

from __future__ import annotations

import sys
import time


def cpu_seconds(skip: frozenset[int] = frozenset()) -> float:
    """User + system CPU seconds of this process and its live descendants (vLLM's), leaving
    out the processes in `skip` (an engine about to be closed: its CPU must not be subtracted
    when it is gone)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        if proc.pid in skip:
            continue
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def children() -> frozenset[int]:
    import psutil

    return frozenset(p.pid for p in psutil.Process().children(recursive=True))


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from searchrl.config.model import ModelConfig
    from searchrl.models.generation import SamplingParams
    from searchrl.models.vllm_backend import VLLMBackend

    path = sys.argv[1]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    config = ModelConfig(vllm_kv_cache_gib=1.0)

    def start() -> VLLMBackend:
        wall, cpu = time.perf_counter(), cpu_seconds(skip=children())
        engine = VLLMBackend.from_module(
            model, tokenizer, config, dtype="bfloat16", max_model_len=2048
        )
        print(f"start: {time.perf_counter() - wall:.1f} s wall, {cpu_seconds() - cpu:.1f} s CPU")
        return engine

    engine = start()
    prompt = [tokenizer.encode("The capital of France is")]
    greedy = [SamplingParams(max_new_tokens=16, temperature=0.0)]
    original = engine.generate(prompt, greedy)[0].token_ids
    for i in range(3):
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "mlp" in name:
                    param.mul_(-1.0)
        cpu = cpu_seconds()
        engine.sync_weights(model)
        out = engine.generate(prompt, greedy)[0].token_ids
        print(
            f"sync {i}: {engine.last_sync_s:.2f} s wall, {cpu_seconds() - cpu:.2f} s CPU; "
            f"greedy {'= original' if out == original else 'changed'}"
        )
    engine.close()
    start().close()


if __name__ == "__main__":
    main()
