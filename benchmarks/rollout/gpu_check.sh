#!/usr/bin/env bash
# Proves the vLLM backend on a machine with an NVIDIA GPU (not run in CI). The backend is one
# class with one code path on CPU and GPU (`searchrl.models.vllm_backend`); this runs the GPU side:
#   1. installs the [vllm] extra into the project venv,
#   2. runs the same greedy multi-turn rollout (embedded SmolLM2, synthetic world, BM25) with the
#      HF backend and with the vLLM backend,
#   3. compares them: same trajectory structure, and greedy text that agrees on most turns
#      (bf16 kernels differ, so a few divergent tokens are expected; sampled runs differ by
#      design because the two engines use different random streams),
#   4. checks weight sync: perturbed weights pushed into the running vLLM engine (vLLM's
#      `reload_weights` from a RAM-backed safetensors file) change its greedy output, and pushing
#      the original weights back restores it exactly; then the engine tests the CPU build runs
#      (tests/unit/models/test_model_vllm.py: log-probs and greedy choices against transformers,
#      stop strings, prefix caching across turns, sync) and the overlap tests,
#   5. two GRPO steps of the tiny preset with model.backend=vllm, synchronous and with the
#      rollouts overlapped with the updates (overlap.enabled=true),
#   6. FSDP (policy.strategy=fsdp) on every visible GPU (2 or more; NCCL): the 2-process test
#      (same whole weights on every rank after a step, exact resume from a sharded
#      checkpoint), then two GRPO steps of `searchrl train` on the embedded model, sharded,
#      with the vLLM engine generating from the gathered weights.
# Usage: bash benchmarks/rollout/gpu_check.sh [N_QUESTIONS]   (run from the repository root)
# Not run yet: no GPU was lent while it was written (issues 12 and 18).
set -euo pipefail
N="${1:-16}"
PY="${PY:-.venv/bin/python}"
nvidia-smi -L
"$PY" -m pip install --quiet -e ".[vllm]"
OUT="$(mktemp -d)"
"$PY" - "$N" "$OUT" <<'PY'
import sys, time

from searchrl.config.data import world_preset
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.world import generate_world
from searchrl.models.loading import load_policy
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.io import write_trajectories
from searchrl.rollout.loop import run_rollouts

n, out = int(sys.argv[1]), sys.argv[2]
world = generate_world(world_preset("test"))
retriever = BM25Retriever.build(world.documents)
questions = world.questions["test"][:n]
config = RolloutConfig(temperature=0.0, max_response_tokens=128)
runs = {}
for backend in ("hf", "vllm"):
    policy = load_policy(ModelConfig(backend=backend, dtype="bfloat16"), max_model_len=4096)
    started = time.perf_counter()
    trajs = run_rollouts(policy.backend, policy.tokenizer, retriever, questions, config)
    seconds = time.perf_counter() - started
    tokens = sum(t.stats.policy_tokens for t in trajs)
    write_trajectories(f"{out}/{backend}.jsonl", trajs)
    print(f"{backend}: {len(trajs)} trajectories, {tokens} policy tokens, {seconds:.1f} s, "
          f"{tokens / seconds:.0f} tokens/s, turns {sum(t.stats.turns for t in trajs) / n:.2f}")
    runs[backend] = trajs
    del policy
same_first = sum(
    h.segments[0].token_ids == v.segments[0].token_ids for h, v in zip(runs["hf"], runs["vllm"])
)
print(f"first turn identical (greedy) in {same_first}/{n} trajectories")
for h, v in zip(runs["hf"], runs["vllm"]):
    for traj in (h, v):
        assert all(s.role in ("policy", "env") for s in traj.segments)
        assert len(traj.loss_mask()) == len(traj.response_ids)
if same_first < n // 2:
    sys.exit("vLLM and HF greedy outputs disagree on most first turns")

import torch
from searchrl.models.loading import load_model
from searchrl.models.generation import SamplingParams

hf = load_model(ModelConfig(dtype="bfloat16", device="cpu")).model
engine = load_policy(ModelConfig(backend="vllm", dtype="bfloat16"), max_model_len=4096)
prompt = [engine.tokenizer.encode("The capital of France is")]
greedy = [SamplingParams(max_new_tokens=24, temperature=0.0)]
before = engine.backend.generate(prompt, greedy)[0].token_ids
original = {k: v.clone() for k, v in hf.state_dict().items()}
with torch.no_grad():
    for name, param in hf.named_parameters():
        if "mlp" in name:
            param.mul_(0.5)
started = time.perf_counter()
engine.backend.sync_weights(hf)
print(f"weight sync: {time.perf_counter() - started:.2f} s")
perturbed = engine.backend.generate(prompt, greedy)[0].token_ids
hf.load_state_dict(original)
engine.backend.sync_weights(hf)
restored = engine.backend.generate(prompt, greedy)[0].token_ids
print(f"greedy before {before[:8]}, perturbed {perturbed[:8]}, restored {restored[:8]}")
if perturbed == before or restored != before:
    sys.exit("vLLM weight sync did not take effect")
print(f"OK; trajectories in {out}")
PY

"$PY" -m pytest -q tests/unit/models/test_model_vllm.py tests/unit/train/test_overlap.py
for overlap in false true; do
  .venv/bin/searchrl train --config tiny_cpu_grpo --out "$OUT/grpo_overlap_$overlap" steps=2 \
    data.eval_size=0 model.backend=vllm algo.behaviour_correction=auto overlap.enabled=$overlap
  grep -o '"timing_s/weight_sync": [0-9.e-]*' "$OUT/grpo_overlap_$overlap/metrics.jsonl"
done

GPUS="$(nvidia-smi -L | wc -l)"
if [ "$GPUS" -ge 2 ]; then
  "$PY" -m pytest -q tests/integration/test_train_fsdp.py
  .venv/bin/accelerate launch --multi_gpu --num_processes "$GPUS" --mixed_precision no \
    --dynamo_backend no .venv/bin/searchrl train --config tiny_cpu_grpo --out "$OUT/fsdp" \
    steps=2 data.eval_size=0 policy.strategy=fsdp model.backend=vllm policy.autocast=bf16
  test -f "$OUT/fsdp/model/config.json"
  echo "FSDP OK on $GPUS GPUs"
else
  echo "FSDP check skipped: $GPUS GPU(s) visible, it needs 2 or more"
fi
