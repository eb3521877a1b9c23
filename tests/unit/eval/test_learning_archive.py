"""`benchmarks/training/learning.py --archive`: the summary rebuilt from the archive alone equals
the campaign's, without the texts that make the campaign large."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "training"))

from learning_archive import archive
from learning_summary import summarize


def _evaluation(folder: Path, ems: list[float]) -> None:
    folder.mkdir(parents=True)
    rows = []
    for i, em in enumerate(ems):
        text = "<think> a </think>\n<answer> x </answer>" if i % 3 else "no tags at all"
        segments = [{"role": "policy", "text": text, "token_ids": [1, 2]}]
        trajectory = {"segments": segments, "answer": "x" if i % 3 else None}
        rows.append({"id": f"q{i}", "set": "world", "hops": 1 + i % 4, "em": em,
                     "trajectory": trajectory})  # fmt: skip
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"overall": {"em": {"mean": sum(ems) / len(ems)}},
               "by_hops": {str(h): {"em": {"mean": 0.5}, "searches": {"mean": float(h)}}
                           for h in (1, 2, 3, 4)}}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


def test_the_archive_alone_gives_the_campaigns_summary(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed in (0, 1):
        d = root / f"seed{seed}"
        for name, shift in (("eval_sft", 0), ("evalx_sft", 1), ("eval_recipe", 2),
                            ("evalx_recipe", 3)):  # fmt: skip
            _evaluation(d / name, [float((i + shift + seed) % 2) for i in range(12)])
        (d / "recipe").mkdir()
        (d / "recipe" / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "critic/score/mean": 0.4}) + "\n"
        )
        (d / "times.json").write_text(json.dumps({"sft": {"wall": 600.0, "cpu": 590.0}}))
    expected = summarize(root, [0, 1], ["recipe"])
    dest = tmp_path / "archive"
    written = archive(root, dest, [0, 1], ["recipe"])
    assert dest / "MANIFEST.json" in written
    assert summarize(dest, [0, 1], ["recipe"]) == expected
    row = json.loads((dest / "seed0" / "eval_sft" / "samples.jsonl").read_text().splitlines()[1])
    assert "trajectory" not in row and row["valid_format"] is True and row["answered"] is True
    assert sum(p.stat().st_size for p in written) < 20_000
