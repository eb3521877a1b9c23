"""The shipped warm start's adapter: SVD factors of a weight change, written in peft's format
and merged back by the loader."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from searchrl.models.loading import tiny_model
from searchrl.models.warm import (
    TARGETS,
    adapter_card,
    low_rank_adapter,
    merge_adapter,
    shipped_adapter,
)

SEVEN_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def _changed(base: torch.nn.Module, rank: int, seed: int) -> torch.nn.Module:
    """`base` plus a random change of rank `rank` on every decoder linear layer."""
    tuned = copy.deepcopy(base)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in tuned.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS:
                out, inp = module.weight.shape
                b = torch.randn(out, rank, generator=gen) * 0.05
                a = torch.randn(rank, inp, generator=gen) * 0.05
                module.weight += b @ a
    return tuned


def test_a_rank_r_change_round_trips_through_the_adapter(tokenizer, tmp_path) -> None:
    base = tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0)
    tuned = _changed(base, rank=2, seed=1)
    fidelity = low_rank_adapter(copy.deepcopy(base), tuned, rank=2, out=tmp_path)
    assert fidelity.kept_energy > 0.999999
    assert (tmp_path / "adapter_model.safetensors").is_file()
    merged = merge_adapter(copy.deepcopy(base), tmp_path)
    ids = torch.tensor([[1, 5, 9, 200, 31]])
    with torch.no_grad():
        got, want, before = (m(ids).logits for m in (merged, tuned, base))
    assert not torch.allclose(before, want, atol=1e-3)  # the change matters
    torch.testing.assert_close(got, want, atol=2e-3, rtol=0)  # fp16 factors
    assert type(merged) is type(base)  # a plain module again
    # trainable as loaded (peft freezes what it loads for inference; RL found nothing to train)
    assert all(p.requires_grad for p in merged.parameters())


def test_a_lower_rank_keeps_part_of_the_change(tokenizer, tmp_path) -> None:
    base = tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0)
    tuned = _changed(base, rank=8, seed=2)
    fidelity = low_rank_adapter(copy.deepcopy(base), tuned, rank=2, out=tmp_path)
    assert 0.1 < fidelity.kept_energy < 0.9
    per_rank = 2 * sum(
        sum(m.weight.shape)
        for n, m in base.named_modules()
        if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in TARGETS
    )
    assert fidelity.parameters == per_rank


def test_the_shipped_adapter_s_card_describes_it_and_carries_its_seven_set_scores() -> None:
    """What `embedded-warm` loads is what its card says (rank, size), scored on the seven sets
    of Table 2 with intervals (issue 64: the old card had no score)."""
    folder = shipped_adapter()
    card = adapter_card(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert card["rank"] == config["r"] == card["fidelity"]["rank"]
    assert card["fidelity"]["bytes"] == (folder / "adapter_model.safetensors").stat().st_size
    assert 0 < card["fidelity"]["kept_energy"] <= 1
    table2 = card["table2"]
    for name in SEVEN_SETS:
        score = table2[name]
        assert score["low"] <= score["mean"] <= score["high"] and score["n"] in (84, 100)
    assert table2["avg"]["low"] <= table2["avg"]["mean"] <= table2["avg"]["high"]
    assert table2["searches_per_question"] > 0
    assert set(card["held_out_em"]) >= {"previous", f"r{card['rank']}"}


def test_the_adapter_benchmark_extracts_ranks_without_library_progress_bars(
    tokenizer, tmp_path
) -> None:
    """`benchmarks/training/warm_adapter.py extract` writes each rank's adapter and merged model
    and prints our lines only (transformers' "Writing model shards" bar came through before)."""
    base = tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0)
    for name, model in (("base", base), ("tuned", _changed(base, rank=4, seed=3))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "training" / "warm_adapter.py"
    env = {k: v for k, v in os.environ.items() if k != "SEARCHRL_VERBOSE"}
    argv = [sys.executable, str(script), "--base", str(tmp_path / "base"), "--tuned",
            str(tmp_path / "tuned"), "--out", str(tmp_path / "out"), "--ranks", "2,4",
            "--index", str(tmp_path), "--stages", "extract"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    printed = done.stdout + done.stderr
    assert "Writing model shards" not in printed and "it/s" not in printed, printed
    fidelity = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    assert fidelity["r4"]["kept_energy"] > 0.9999 > fidelity["r2"]["kept_energy"]
    assert (tmp_path / "out" / "r2" / "model" / "config.json").is_file()
