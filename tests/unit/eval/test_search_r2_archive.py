"""`benchmarks/search_r2/search_r2_archive.py`: a campaign's summary rebuilt from its archive alone,
the archive without the texts that make it large, and a warm start told apart by its weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from search_r2_archive import archive, fingerprint, slim_row
from search_r2_summary import summarize

ARMS = ["r1_g", "confidence"]


def _rows(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _campaign(tmp_path: Path) -> tuple[Path, Path]:
    """Two seeds of two arms from one warm start, with the files the benchmark leaves."""
    warm = tmp_path / "sft2"
    (warm / "model").mkdir(parents=True)
    (warm / "model" / "model.safetensors").write_bytes(b"weights" * 1000)
    (warm / "summary.json").write_text(json.dumps({"meta/roc_auc": 0.73, "meta/labelled": 120}))
    root = tmp_path / "runs"
    text = "<think>a long trajectory</think><search>q</search>" * 50

    def evaluation(folder: Path, seed: int, shift: int, refiner: bool) -> None:
        rows = []
        for q in range(40):
            row: dict[str, object] = {"id": f"q{q}", "set": "world", "hops": 1 + q % 4,
                                      "em": float((q + shift + seed) % 3 == 0),
                                      "trajectory": text, "prediction": "Mifour"}  # fmt: skip
            if refiner:
                row |= {"actor_em": float((q + seed) % 2 == 0), "revised": q % 5 == 0}
            rows.append(row)
        _rows(folder / "samples.jsonl", rows)
        (folder / "summary.json").write_text(json.dumps({"n": len(rows)}))

    evaluation(root / "eval_sft", 0, 1, False)
    for seed in (0, 1):
        d = root / f"seed{seed}"
        evaluation(d / "eval_r1_g", seed, 0, False)
        evaluation(d / "eval_confidence", seed, 2, True)
        for arm in ARMS:
            steps = [{"step": s, "timing_s/step": 100.0 + 10 * s + seed,
                      "refiner/a_prec": 0.01 * s - 0.02 * seed, "refiner/s_trim": 0.1 - 0.03 * s}
                     for s in (1, 2, 3)]  # fmt: skip
            _rows(d / arm / "metrics.jsonl", steps)
            (d / arm / "model").mkdir(parents=True)
            (d / arm / "model" / "model.safetensors").write_bytes(b"\0" * 50_000)
        times = {"r1_g": {"wall": 600.0, "cpu": 900.0}, "confidence": {"wall": 700.0, "cpu": 1.0}}
        (d / "times.json").write_text(json.dumps(times))
    return root, warm


def test_the_summary_is_rebuilt_from_the_archive_alone(tmp_path: Path) -> None:
    root, warm = _campaign(tmp_path)
    before = summarize(root, [0, 1], ARMS, warm)
    dest = tmp_path / "archive"
    written = archive(root, dest, [0, 1], ARMS, warm)
    assert dest / "MANIFEST.json" in written
    assert not list(dest.rglob("*.safetensors"))  # no model travels
    after = summarize(dest, [0, 1], ARMS, dest / "warm_start")
    assert after == before
    assert "| confidence discriminator | " in after  # the paired rows were computed, not empty
    kept = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    source = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
    assert kept < source / 5


def test_an_archived_row_keeps_scores_and_flags_not_texts() -> None:
    row = {"id": "q1", "set": "hotpotqa", "em": 1.0, "actor_em": 0.0, "revised": True,
           "hops": 2, "trajectory": "<think>…</think>", "prediction": "Paris"}  # fmt: skip
    assert slim_row(row) == {"id": "q1", "set": "hotpotqa", "em": 1.0, "actor_em": 0.0,
                             "revised": True, "hops": 2}  # fmt: skip


def test_the_manifest_tells_warm_starts_apart_by_their_weights(tmp_path: Path) -> None:
    root, warm = _campaign(tmp_path)
    manifest = json.loads((archive(root, tmp_path / "a", [0], ARMS, warm)[-1]).read_text())
    digest = manifest["warm_start_sha256"]["warm_start"]
    assert digest == fingerprint(warm / "model")
    assert manifest["seeds"] == [0] and manifest["arms"] == ARMS
    assert isinstance(manifest["cpu"]["flags"], list)
    (warm / "model" / "model.safetensors").write_bytes(b"weights" * 999 + b"weightz")
    assert fingerprint(warm / "model") != digest
    assert fingerprint(tmp_path / "nothing") is None


def test_the_archive_refuses_to_overwrite_the_campaign(tmp_path: Path) -> None:
    root, warm = _campaign(tmp_path)
    with pytest.raises(ValueError, match="must not be the campaign"):
        archive(root, root, [0], ARMS, warm)
    assert (root / "seed0" / "eval_r1_g" / "samples.jsonl").read_text().count('"trajectory":') == 40
