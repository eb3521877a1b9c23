"""The per-rank memory plan (`searchrl train --dry-run`, `train/memory_plan.py`) of the paper
presets for three model sizes, on 1 and 8 GPUs of 80 GiB, as one markdown table: the numbers
of docs/training.md's "Memory plan" section. Reads config.json files only (the two Qwen2.5
configs are written from their model cards into a temporary folder); no GPU, no weights.

    python benchmarks/training/memory_plan_table.py [--gpu-gib 80]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

QWEN = {
    "Qwen2.5-3B": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                   "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                   "tie_word_embeddings": True},
    "Qwen2.5-7B": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "tie_word_embeddings": False},
}  # fmt: skip
"""The config.json fields that set their sizes (Qwen's model cards)."""


def model_folders(root: Path) -> dict[str, str]:
    """name → `model.name_or_path`: the embedded model, and a folder per Qwen config."""
    folders = {"SmolLM2-135M (embedded)": "embedded"}
    for name, fields in QWEN.items():
        folder = root / name
        folder.mkdir()
        config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **fields}
        (folder / "config.json").write_text(json.dumps(config))
        folders[name] = str(folder)
    return folders


def main() -> None:
    from searchrl.cli.options import settings
    from searchrl.config.train import TrainConfig
    from searchrl.train.memory_plan import GIB, dry_run_plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-gib", type=float, default=80.0)
    args = parser.parse_args()
    print(
        "| model | preset | GPUs | strategy | GiB a GPU generating / updating | host GiB a rank "
        "| vLLM KV tokens | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in model_folders(Path(tmp)).items():
            for preset in ("search_r1_grpo", "search_r1_ppo"):
                for gpus in (1, 8):
                    overrides = [f"model.name_or_path={path}", f"plan.gpus={gpus}",
                                 f"plan.gpu_memory_gib={args.gpu_gib}"]  # fmt: skip
                    plan = dry_run_plan(settings(TrainConfig, preset, overrides))
                    host = sum(i.host for i in plan.items if i.when != "start") / GIB
                    verdict = "fits" if plan.fits else f"needs {plan.need / GIB:.0f} GiB"
                    print(f"| {name} | {preset} | {gpus} | {plan.strategy} | "
                          f"{plan.phase('rollout') / GIB:.1f} / {plan.phase('update') / GIB:.1f} "
                          f"| {host:.1f} | {plan.kv_tokens:,} | {verdict} |")  # fmt: skip


if __name__ == "__main__":
    main()
