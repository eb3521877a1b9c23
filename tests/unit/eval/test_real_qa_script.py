"""`benchmarks/eval/real_qa.py`: each arm differs from Search-R1 by its one setting, the trained
policies are evaluated under their recipe's budgets, and the table and archive are built from
what the stages left."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "eval"))

import real_qa
import real_qa_report
from searchrl.config.loading import load_config
from searchrl.config.presets import resolve_config as resolve_preset
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig


def _args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        out=tmp_path / "out", qa=tmp_path / "qa", corpus=tmp_path / "c.jsonl", limit=100,
        retriever="dense", seed=0, steps=20, rejection_questions=128, sft_set=[], rl_set=[],
        batch_size=16, index=None, before=tmp_path / "old",
    )  # fmt: skip


def _config(argv: list[str]):
    """The config a `searchrl sft|train --config P --out D [--force|--resume] k=v…` loads."""
    cls = SFTConfig if argv[3] == "sft" else TrainConfig
    overrides = [a for a in argv[8:] if "=" in a and not a.startswith("--")]
    return load_config(cls, resolve_preset(argv[5]), overrides)


def test_the_arms_differ_from_search_r1_by_one_setting(tmp_path: Path) -> None:
    args = _args(tmp_path)
    r1 = _config(real_qa.train_command(args, "search-r1"))
    assert r1.data.train_files == (
        f"{args.qa}/nq.jsonl[1000:]",
        f"{args.qa}/hotpotqa.jsonl[1000:]",
    )
    assert r1.policy.init_checkpoint.endswith("train/sft/model") and r1.steps == 20
    assert r1.algo.mask_env and r1.rollout.search and r1.data.eval_size == 0
    unmasked = _config(real_qa.train_command(args, "unmasked"))
    assert not unmasked.algo.mask_env
    assert _config(real_qa.train_command(args, "r1")).rollout.search is False
    for name, source in (("sft", "references"), ("direct-ft", "direct"), ("rag-ft", "rag")):
        config = _config(real_qa.train_command(args, name))
        assert config.source == source and not config.policy.init_checkpoint
        assert config.data.index_dir == str(args.out / "index" / "dense")
    rejection = _config(real_qa.train_command(args, "rejection"))
    assert rejection.source == "rejection" and rejection.max_examples == 128
    assert rejection.policy.init_checkpoint.endswith("train/sft/model")


def test_trained_search_policies_evaluate_under_their_recipe(tmp_path: Path) -> None:
    args = _args(tmp_path)
    cells = {c.name: real_qa.eval_command(args, c) for c in real_qa.CELLS}
    assert "rollout.force_answer=true" in cells["search-r1-unmasked"]
    assert "rollout.force_answer=true" not in cells["rag-ft"]
    assert "--index" in cells["rag"] and "--index" not in cells["direct-ft"]
    assert cells["search-r1-unmasked"][cells["search-r1-unmasked"].index("--model") + 1] == str(
        args.out / "train" / "unmasked" / "model"
    )
    assert all(c[c.index("--limit") + 1] == "100" for c in cells.values())
    assert cells["shipped"][cells["shipped"].index("--model") + 1] == "embedded-warm"
    assert "rollout.force_answer=true" in cells["shipped"]
    check = real_qa.eval_command(args, next(c for c in real_qa.CELLS if c.name == "sft"), True)
    data = [check[i + 1] for i, a in enumerate(check) if a == "--data"]
    assert data == [str(args.qa / rows) for rows in real_qa.CHECK_ROWS] and "--limit" not in check
    assert check[check.index("--out") + 1] == str(args.out / "check" / "sft")
    for rows in real_qa.CHECK_ROWS:  # neither trained on (rows 1000 on) nor reported (0-99)
        first, last = (int(x) for x in rows.split("[")[1].rstrip("]").split(":"))
        assert 100 <= first < last <= 500
    args.index = tmp_path / "built"
    assert real_qa.eval_command(args, real_qa.CELLS[1])[-1] != ""
    assert str(tmp_path / "built") in real_qa.eval_command(args, real_qa.CELLS[1])


def _summary(method: str, em: float) -> dict:
    estimate = {"mean": em, "low": em - 0.05, "high": em + 0.05}
    block = {"em": estimate, "n": 100}
    return {
        "method": method,
        "by_set": {"nq": block, "hotpotqa": block},
        "by_category": {"general": block, "multi-hop": block},
        "average": {"em": estimate, "subem": estimate},
        "overall": {"n": 200, "em": estimate, "searches": {"mean": 1.5}},
    }


def test_the_table_and_the_archive_read_what_the_stages_left(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name, em in (("sft", 0.1), ("search-r1", 0.2)):
        folder = out / "evals" / name
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(_summary(name, em)))
        row = {"id": "nq:1", "set": "nq", "em": em, "prediction": "Culiacán", "searches": 1,
               "queries": ["sinaloa cartel country"], "stop_reason": "answer",
               "shown": ["12", "7"], "gold_shown": True, "question": "In what country…",
               "trajectory": {"segments": []}, "documents": {"12": "…"}}  # fmt: skip
        (folder / "samples.jsonl").write_text(json.dumps(row) + "\n")
    comparison = {"mean_a": 0.2, "mean_b": 0.1, "diff": 0.1, "low": 0.02, "high": 0.18,
                  "wins": 12, "losses": 2, "p_value": 0.01}  # fmt: skip
    (out / "compare").mkdir()
    (out / "compare" / "search-r1_vs_sft.json").write_text(
        json.dumps({"rows": {"average": comparison, "nq": comparison}})
    )
    (out / "times.json").write_text(json.dumps({"train:sft": {"wall_s": 600, "cpu_s": 540}}))
    text = real_qa_report.table_markdown(out, ["sft", "search-r1", "rag"], [("search-r1", "sft")])
    assert "| search-r1 | search-r1 | 0.200 [0.15, 0.25] |" in text
    assert "| search-r1 vs sft | 0.200 | 0.100 | +0.100 [+0.020, +0.180] | 12 / 2 |" in text
    assert "| train:sft | 10.0 min | 9.0 min |" in text and "| rag |" not in text
    written = real_qa_report.archive(out, tmp_path / "archive", ["sft", "search-r1"])
    kept = json.loads((tmp_path / "archive" / "evals" / "sft" / "samples.jsonl").read_text())
    assert kept == {  # the evidence a reader needs, not the trajectory or the passages
        "id": "nq:1", "set": "nq", "em": 0.1, "searches": 1, "prediction": "Culiacán",
        "queries": ["sinaloa cartel country"], "stop_reason": "answer", "shown": ["12", "7"],
        "gold_shown": True,
    }  # fmt: skip
    assert tmp_path / "archive" / "MANIFEST.json" in written


def test_stage_times_of_two_processes_into_one_out_are_both_kept(tmp_path: Path) -> None:
    """Two `real_qa.py` runs into one OUT (a training beside an evaluation) each hold a
    `Times`; the one that writes last must not drop the other's stage."""
    path = tmp_path / "times.json"
    first, second = real_qa.Times(path), real_qa.Times(path)
    command = [sys.executable, "-c", "pass"]
    first.run("train:sft", command, tmp_path / "a.log")
    second.run("eval:shipped", command, tmp_path / "b.log")
    second.run("eval:shipped", command, tmp_path / "b.log")
    rows = json.loads(path.read_text())
    assert set(rows) == {"train:sft", "eval:shipped"}
    assert rows["eval:shipped"]["wall_s"] > 0 and rows["train:sft"]["wall_s"] > 0


def test_a_stage_s_log_can_be_followed_while_it_runs(tmp_path: Path) -> None:
    """A stage's lines reach OUT/logs/<stage>.log as they are printed (the log of an hour-long
    training stayed empty until the stage ended): the stage below fails unless it finds its
    own first line in the log while it is still running."""
    log = tmp_path / "stage.log"
    child = (
        "import sys, time, pathlib\n"
        "print('screening: 32/128 questions', flush=True)\n"
        "log = pathlib.Path(sys.argv[1])\n"
        "for _ in range(100):\n"
        "    if log.is_file() and b'32/128' in log.read_bytes(): sys.exit(0)\n"
        "    time.sleep(0.05)\n"
        "sys.exit(1)\n"
    )
    real_qa.Times(tmp_path / "times.json").run(
        "train:x", [sys.executable, "-c", child, str(log)], log
    )
    assert "32/128" in log.read_text()
