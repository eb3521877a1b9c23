"""What an earlier `searchrl demo` left in a run folder, and whether its stages were made with
the settings asked for now. `run_demo` reuses every stage it finds (world, SFT, a GRPO run's
checkpoints); a stage made with other settings would silently mix two configurations into
one result, so the command refuses it before anything runs, and `--force` clears the folder's
demo stages (never other files) to start afresh."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from searchrl.config.demo import DemoConfig
from searchrl.config.describe import format_value
from searchrl.config.loading import to_dict
from searchrl.utils.errors import SearchRLError

STAGES = ("world", "sft", "grpo")
OUTPUTS = ("curves.png", "summary.json", "report.html")
FILLED_IN = ("data.world_dir", "data.exclude_trained_by", "policy.init_checkpoint")
"""Keys `run_demo` sets itself (the stage folders' paths): never a difference of settings."""


class StageMismatch(SearchRLError):
    """A stage in the run folder was made with other settings than this run asks for."""


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data}
    return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def _recorded(out: Path, stage: str) -> dict[str, Any] | None:
    """The settings a stage folder records, or None when the stage was never started."""
    if stage == "world":
        manifest = out / "world" / "manifest.json"
        return json.loads(manifest.read_text()).get("config") if manifest.is_file() else None
    config = out / stage / "config.yaml"
    return yaml.safe_load(config.read_text()) if config.is_file() else None


def differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """`key: X there, Y now` for every setting that differs (paths the demo fills ignored)."""
    before, now = _flat(recorded), _flat(wanted)
    keys = sorted((before.keys() | now.keys()) - set(FILLED_IN))
    return [
        f"{key}: {format_value(before.get(key))} there, {format_value(now.get(key))} now"
        for key in keys
        if format_value(before.get(key)) != format_value(now.get(key))
    ]


def check_stages(config: DemoConfig, out: Path) -> None:
    """Refuse a folder holding a demo stage made with other settings (nothing is touched)."""
    wanted = {
        "world": to_dict(config.world),
        "sft": to_dict(config.sft),
        "grpo": to_dict(config.rl),
    }
    for stage in STAGES:
        recorded = _recorded(out, stage)
        if recorded is None:
            continue
        changed = differences(recorded, wanted[stage])
        if changed:
            more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
            raise StageMismatch(
                f"{out / stage} was made with other settings ({'; '.join(changed[:3])}{more}); "
                "pass --force to start afresh, or use another --out"
            )


def clear_stages(out: Path) -> None:
    """Remove what a demo writes into `out` (its stages and summary files) and nothing else."""
    for name in STAGES:
        shutil.rmtree(out / name, ignore_errors=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
