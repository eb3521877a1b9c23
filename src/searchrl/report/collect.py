"""Find what a report shows under the folders it is given: training runs (`metrics.jsonl`,
written by `searchrl train`/`sft`/`demo`) and evaluations (`samples.jsonl` + `summary.json`,
written by `searchrl eval`), at any depth; and turn trajectories of either into the compact
records the page's viewer reads.

Training runs whose `config.yaml` differ only in `seed` form one group: the page draws their
mean with a band (min to max across seeds) instead of one line each.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from searchrl.data.benchmarks import DataError, load_flashrag_jsonl
from searchrl.eval.store import read_samples

_SKIP_DIRS = {"checkpoints", "tensorboard", "model", "world", "__pycache__", ".git"}
_MAX_DEPTH = 5
_EVAL_STEP = re.compile(r"eval_step_(\d+)\.jsonl$")
WORLD_SOURCE = "world"
"""The source name training gives world questions (`train.environment.WORLD_SOURCE`)."""


@dataclass
class TrainingRun:
    """One `metrics.jsonl` folder."""

    path: Path
    label: str
    rows: list[dict[str, float]]
    group: str
    """Runs with the same group differ only in seed."""
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def last_eval_trajectories(self) -> Path | None:
        """The held-out trajectories of the latest evaluated step, if saved."""
        found = []
        for path in (self.path / "trajectories").glob("eval_step_*.jsonl"):
            match = _EVAL_STEP.search(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return max(found)[1] if found else None


@dataclass
class Evaluation:
    """One `searchrl eval` folder."""

    path: Path
    label: str
    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    run: dict[str, Any] = field(default_factory=dict)
    """`run.json`: method, model, engine, search engine (empty for folders without one)."""

    @property
    def retriever(self) -> str:
        """`bm25`, `dense`, `hybrid`, `server`, `none` (a method that never searches) or `?`
        (a folder written before `run.json` recorded it)."""
        if "retriever" not in self.run:
            return "?"
        found = self.run["retriever"]
        if found is None:
            return "none"
        return str(found.get("kind") or ("server" if "url" in found else "?"))

    @property
    def method(self) -> str:
        return str(self.summary.get("method") or (self.rows[0]["method"] if self.rows else "?"))

    @property
    def model(self) -> str:
        return str(self.summary.get("model", ""))


def _walk(root: Path) -> Iterable[Path]:
    base_depth = len(root.parts)
    for current, dirs, files in os.walk(root):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        if len(here.parts) - base_depth >= _MAX_DEPTH:
            dirs[:] = []
        if "metrics.jsonl" in files or "samples.jsonl" in files:
            yield here


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a run being written right now may end in a partial line
    return rows


def _group_key(config: dict[str, Any], path: Path) -> str:
    if not config:
        return str(path)
    return json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True)


def _label(path: Path, roots: Sequence[Path]) -> str:
    for root in roots:
        try:
            rel = path.resolve().relative_to(root.resolve())
        except ValueError:
            continue
        name = str(rel) if str(rel) != "." else ""
        return f"{root.name}/{name}".rstrip("/") if len(roots) > 1 or not name else name
    return path.name


def discover(roots: Sequence[Path]) -> tuple[list[TrainingRun], list[Evaluation]]:
    """Every training run and evaluation under `roots`, in a stable order."""
    runs: list[TrainingRun] = []
    evals: list[Evaluation] = []
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such folder")
        for folder in _walk(root):
            if folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            label = _label(folder, roots)
            if (folder / "samples.jsonl").is_file():
                summary_path = folder / "summary.json"
                summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
                run_path = folder / "run.json"
                run = json.loads(run_path.read_text()) if run_path.is_file() else {}
                rows = read_samples(folder / "samples.jsonl")
                evals.append(Evaluation(folder, label, summary, rows, run))
            if (folder / "metrics.jsonl").is_file():
                config_path = folder / "config.yaml"
                config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
                rows = _read_jsonl(folder / "metrics.jsonl")
                runs.append(
                    TrainingRun(folder, label, rows, _group_key(config or {}, folder), config or {})
                )
    return runs, evals


def _refinement(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    keys = ("revised", "cut_step", "prefix_segments", "log_odds")
    return {k: value.get(k) for k in keys if k in value}


def _world_hops(run: TrainingRun) -> dict[str, int]:
    """uid → hops of the run's held-out split, read from its world folder when it is there
    (training trajectories do not record hops)."""
    data = run.config.get("data") or {}
    path = Path(str(data.get("world_dir") or "")) / f"{data.get('eval_split', 'test')}.jsonl"
    if not data.get("world_dir") or not path.is_file():
        return {}
    try:
        questions = load_flashrag_jsonl(path, WORLD_SOURCE)
    except DataError:
        return {}
    return {q.uid: q.hops for q in questions if q.hops is not None}


def viewer_record(source: str, traj: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    """A trajectory as the viewer reads it (token ids dropped). `row` is the evaluation row
    that holds it (set, hops, documents), None for a training run's trajectory."""
    uid = str(traj.get("uid") or traj.get("id", ""))
    metrics = traj.get("metrics") or {}
    row = row or {}
    return {
        "source": source,
        "id": row.get("id", uid),
        "method": row.get("method", ""),
        "set": row.get("set") or (uid.split(":", 1)[0] if ":" in uid else ""),
        "hops": row.get("hops"),
        "question": traj.get("question", ""),
        "golden": traj.get("golden_answers", []),
        "prediction": traj.get("answer"),
        "em": float(row.get("em", metrics.get("em", 0.0)) or 0.0),
        "f1": float(row.get("f1", metrics.get("f1", 0.0)) or 0.0),
        "searches": [
            {"query": c.get("query", ""), "doc_ids": c.get("doc_ids", [])}
            for c in traj.get("searches", [])
        ],
        "turns": (traj.get("stats") or {}).get("turns", 0),
        "stop": (traj.get("stats") or {}).get("stop_reason", ""),
        "prompt": traj.get("prompt", ""),
        "segments": [{"role": s["role"], "text": s["text"]} for s in traj.get("segments", [])],
        "documents": row.get("documents", {}),
        "refinement": _refinement(traj.get("refinement")),
    }


def trajectory_records(
    runs: Sequence[TrainingRun], evals: Sequence[Evaluation], per_source: int
) -> list[dict[str, Any]]:
    """Viewer records: the first `per_source` rows of every evaluation, and of every training
    run's last held-out evaluation."""
    records: list[dict[str, Any]] = []
    for ev in evals:
        for row in ev.rows[:per_source]:
            records.append(viewer_record(ev.label, row["trajectory"], row))
    for run in runs:
        path = run.last_eval_trajectories
        if path is None:
            continue
        step = _EVAL_STEP.search(path.name).group(1)  # type: ignore[union-attr]
        hops = _world_hops(run)
        for traj in _read_jsonl(path)[:per_source]:
            record = viewer_record(f"{run.label} @ step {step}", traj, None)
            record["hops"] = hops.get(str(traj.get("uid", "")))
            records.append(record)
    return records
