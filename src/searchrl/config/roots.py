"""The root config of each command, and which root a YAML file or a run folder holds: what
`searchrl config show` and the configuration reference start from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.config.data import WorldConfig
from searchrl.config.demo import DemoConfig
from searchrl.config.errors import ConfigError
from searchrl.config.eval import EvalConfig, ReportConfig, RubricConfig
from searchrl.config.interactive import InteractiveConfig
from searchrl.config.loading import from_dict, read_yaml
from searchrl.config.retrieval import RetrievalConfig
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig


@dataclass(frozen=True)
class Root:
    """A root config and the commands that read it."""

    name: str
    cls: type
    commands: tuple[str, ...]


ROOTS = (
    Root("train", TrainConfig, ("train",)),
    Root("sft", SFTConfig, ("sft",)),
    Root("demo", DemoConfig, ("demo",)),
    Root("eval", EvalConfig, ("eval",)),
    Root("rollout", InteractiveConfig, ("rollout", "chat")),
    Root("retrieval", RetrievalConfig, ("index", "search", "serve")),
    Root("world", WorldConfig, ("world",)),
    Root("judge", RubricConfig, ("eval judge",)),
    Root("report", ReportConfig, ("report",)),
)


def root_named(name: str) -> Root | None:
    """The root of a name or of a command that reads it (`chat` → rollout, `index` →
    retrieval), else None."""
    return next((r for r in ROOTS if name == r.name or name in r.commands), None)


def detect(data: dict[str, Any]) -> Root:
    """The first root (in `ROOTS` order) that `data` is a valid config of; a ConfigError
    naming the first root's complaint when none is."""
    errors = []
    for root in ROOTS:
        try:
            from_dict(root.cls, data)
        except ConfigError as err:
            errors.append(f"{root.name}: {err}")
            continue
        return root
    raise ConfigError(f"not the settings of any command ({errors[0]})")


def run_settings(folder: Path) -> dict[str, Any]:
    """The settings a run folder was made with: `config.yaml` (train, sft) or the `config` a
    demo's `summary.json` records."""
    config = folder / "config.yaml"
    if config.is_file():
        return read_yaml(config)
    summary = folder / "summary.json"
    if summary.is_file():
        recorded = json.loads(summary.read_text()).get("config")
        if isinstance(recorded, dict):
            return recorded
    raise ConfigError(f"{folder}: no config.yaml (nor a demo's summary.json) in this folder")
