#!/usr/bin/env bash
# Whole multi-turn rollouts per generation engine, one run: the same questions, greedy.
#   benchmarks/rollout/rollout_engines.sh DATA.jsonl INDEX_DIR MODEL_DIR [N_QUESTIONS] [OUT_DIR]
# Prints policy tokens / generation seconds (from each trajectory's stats) per engine.
set -euo pipefail
data=$1 index=$2 model=$3 n=${4:-16} out=${5:-runs/rollout_engines}
bin=$(dirname "$(command -v python)")
mkdir -p "$out"
engines=("default:" "hf:model.backend=hf"
         "hf-fp32:model.backend=hf model.generation_dtype=float32" "vllm:model.backend=vllm")
printf '| engine | policy tokens | generation s | tokens/s | EM |\n|---|---:|---:|---:|---:|\n'
for entry in "${engines[@]}"; do
  name=${entry%%:*}
  # shellcheck disable=SC2086
  "$bin/searchrl" rollout --data "$data" --index "$index" --model "$model" --limit "$n" \
    --greedy --force --out "$out/$name.jsonl" ${entry#*:} > "$out/$name.log" 2>&1
  python - "$out/$name.jsonl" "$name" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
tokens = sum(r["stats"]["policy_tokens"] for r in rows)
seconds = sum(r["stats"]["generation_s"] for r in rows)
em = sum(r["metrics"]["em"] for r in rows) / len(rows)
print(f"| {sys.argv[2]} | {tokens} | {seconds:.1f} | {tokens / seconds:.1f} | {em:.2f} |")
PY
done
