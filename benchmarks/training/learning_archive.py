"""Keep what `benchmarks/training/learning.py --summarize` reads, small enough to commit.

A learning campaign's `runs/` folder (worlds, warm starts, checkpoints, trajectories) is GBs on
one machine; the archive keeps, per seed, the per-question results of every evaluation (scores,
search counts, and the valid-format and answered flags computed from the texts, which are
dropped), every arm's per-step metrics and screening verdicts, the temperature-1 samples of
pass@k (scores only), the stage times, the SFT summaries and the worlds'
manifests, in the same layout, so

    python benchmarks/training/learning.py --out ARCHIVE --seeds 0 1 2 3 4 --arms recipe --summarize

reproduces the tables from the archive alone. `MANIFEST.json` records where it ran (CPU, bf16
support, versions, commit) and a fingerprint of each seed's warm start weights.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learning_summary import behaviour_flags

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search_r2"))  # its archive helpers
from search_r2_archive import fingerprint, slim_row


def _copy(src: Path, dst: Path) -> list[Path]:
    if not src.is_file():
        return []
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return [dst]


def _slim(row: dict[str, Any]) -> dict[str, Any]:
    valid, answered = behaviour_flags(row)
    return {**slim_row(row), "valid_format": valid, "answered": answered}


def _evaluation(src: Path, dst: Path) -> list[Path]:
    rows = src / "samples.jsonl"
    if not rows.is_file() or not (src / "summary.json").is_file():
        return []  # unfinished: the summary does not pair it either
    dst.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(_slim(json.loads(x))) for x in rows.read_text().splitlines() if x.strip()]
    (dst / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    return [dst / "samples.jsonl", *_copy(src / "summary.json", dst / "summary.json")]


def _sampled(src: Path, dst: Path) -> list[Path]:
    """A pass@k file without its texts: each sample's question, score and searches."""
    rows = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    slim = [{"id": r["id"], "uid": r.get("uid"), "metrics": r["metrics"],
             "searches": r["stats"]["searches"], "answered": r.get("answer") is not None}
            for r in rows]  # fmt: skip
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(json.dumps(r) + "\n" for r in slim))
    return [dst]


def archive(root: Path, dest: Path, seeds: Sequence[int], arms: Sequence[str]) -> list[Path]:
    """Copy the summary's inputs from the campaign `root` into `dest`; returns what was
    written."""
    from search_r2_archive import _commit, _versions  # the same records as that archive
    from searchrl.models.precision import cpu_summary  # torch: only when archiving

    if dest.resolve() == root.resolve():
        raise ValueError(f"the archive must not be the campaign itself: {dest}")
    written: list[Path] = []
    fingerprints: dict[str, str | None] = {}
    for seed in seeds:
        src, dst = root / f"seed{seed}", dest / f"seed{seed}"
        written += _copy(src / "times.json", dst / "times.json")
        for world in ("world", "cross"):
            written += _copy(src / world / "manifest.json", dst / world / "manifest.json")
        for warm in ("sft", "sft_weak"):
            written += _copy(src / warm / "summary.json", dst / warm / "summary.json")
            if (src / warm / "model").is_dir():
                fingerprints[f"seed{seed}/{warm}"] = fingerprint(src / warm / "model")
        for folder in sorted(src.glob("eval*_*")):
            written += _evaluation(folder, dst / folder.name)
        for arm in [*arms, "overfit"]:
            written += _copy(src / arm / "metrics.jsonl", dst / arm / "metrics.jsonl")
            written += _copy(src / arm / "screen.json", dst / arm / "screen.json")
        for sampled in sorted([*src.glob("pass_*.jsonl"), *src.glob("fixed_*.jsonl")]):
            written += _sampled(sampled, dst / sampled.name)
    manifest = {
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "campaign": str(root),
        "seeds": list(seeds),
        "arms": list(arms),
        "warm_start_sha256": fingerprints,
        "cpu": cpu_summary(),
        "versions": _versions(),
        "commit": _commit(),
    }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return [*written, dest / "MANIFEST.json"]
