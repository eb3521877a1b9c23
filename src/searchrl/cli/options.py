"""The one grammar every `searchrl` command shares: the same options mean the same thing in
every command, and settings are built and checked in one way.

    searchrl COMMAND [--config PRESET|FILE] [options] [key=value ...]

Settings are layered, later layers winning: the command's defaults (`searchrl.config`), a
trained run's own rollout settings where a command reads a run's model, `--config` (a shipped
preset by name, or any YAML file), the options (`--seed`, `--model`, `--index`, ...), then
the `key=value` arguments (`--set key=value` is the same). A bad value typed on the command
line is a usage error: one line, exit code 2 (`config.loading.build`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from searchrl.config.checks import MAX_SEED
from searchrl.config.describe import format_value
from searchrl.config.errors import ConfigError, OverrideError
from searchrl.config.loading import build, merge, nest, parse_overrides, read_yaml
from searchrl.config.presets import resolve_config
from searchrl.config.rollout import RolloutConfig
from searchrl.config.roots import detect

T = TypeVar("T")

ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        help="A shipped preset by name (`searchrl config list`) or a YAML file of settings.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="A key=value setting (the same as a key=value argument)."),
]
OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="KEY=VALUE",
        help="Settings, e.g. rollout.max_turns=5 (`searchrl config show COMMAND` lists every "
        "key with its default and meaning).",
        show_default=False,
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option("--seed", min=0, max=MAX_SEED, help="Random seed (the `seed` key)."),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model: a trained run's folder or its model/, a hub id, a local HF folder, a "
        ".gguf file, or 'embedded' (the `model.name_or_path` key).",
    ),
]
IndexOption = Annotated[
    Path | None, typer.Option("--index", help="Index directory built by `searchrl index`.")
]
UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="A Search-R1 compatible /retrieve server instead of --index."),
]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue from the last checkpoint in --out.")
]
RunSettingsOption = Annotated[
    bool,
    typer.Option(
        "--run-settings/--no-run-settings",
        help="With a trained run's model: use the rollout settings it was trained with (turn "
        "budget, forced answer, token limits; not the sampling temperature). Off: the "
        "command's defaults.",
    ),
]

KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*=")
"""What a `key=value` argument looks like (a path or a query rarely does)."""
NOT_ADOPTED = ("temperature", "top_p")
"""Rollout settings a trained run's config does not pass on: training samples at
temperature 1, evaluation decodes greedily, and the command decides."""


def settings(
    cls: type[T],
    config: str | None = None,
    overrides: Sequence[str] = (),
    flags: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> T:
    """`cls` from, in order: `base` (e.g. a trained run's rollout settings), the `--config`
    preset or file, `flags` (dotted key → the value of an option; None = not given) and the
    `key=value` overrides. Bad command-line values exit 2, bad file values exit 1."""
    from_file = read_yaml(resolve_config(config)) if config is not None else {}
    given = nest({key: value for key, value in (flags or {}).items() if value is not None})
    try:
        return build(cls, merge(base or {}, from_file), merge(given, parse_overrides(overrides)))
    except ConfigError as err:
        from_the_file = config is not None and not isinstance(err, OverrideError)
        unknown = from_the_file and "unknown config key" in str(err)
        owner = _owner(from_file, cls) if unknown else None
        if owner is None:
            raise
        raise type(err)(f"--config {config} holds settings of `searchrl {owner}` ({err})") from None


def _owner(data: dict[str, Any], cls: type) -> str | None:
    """The command whose settings `data` are, when it is another command than `cls`'s."""
    try:
        root = detect(data)
    except ConfigError:
        return None
    return None if root.cls is cls else " / ".join(root.commands)


def joined(sets: list[str] | None, positional: list[str] | None) -> list[str]:
    """`--set` values and positional `key=value` arguments as one list (in that order)."""
    return [*(sets or []), *(positional or [])]


def split_overrides(args: Sequence[str], cls: type) -> tuple[list[str], list[str]]:
    """Positional arguments of a command that also takes other positional values (queries,
    folders): those of the form `key=value` whose first key part is a setting of `cls` are
    overrides, the rest are the command's own values."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    plain, overrides = [], []
    for arg in args:
        is_setting = KEY.match(arg) is not None and arg.split(".")[0].split("=")[0] in names
        (overrides if is_setting else plain).append(arg)
    return plain, overrides


def resolve_model(model: str | None) -> str | None:
    """A run folder given as the model means its exported `model/`."""
    if model is None:
        return None
    path = Path(model)
    if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        return str(path / "model")
    return model


def run_rollout(model: str | None) -> tuple[Path, dict[str, Any]] | None:
    """The rollout settings of the run that trained `model` (a `RUN/model` folder next to
    the `RUN/config.yaml` that `train` and `sft` write), without the sampling settings; None
    when `model` is not a run's model."""
    if model is None or not Path(model).is_dir():
        return None
    config = Path(model).parent / "config.yaml"
    if not config.is_file():
        return None
    recorded = read_yaml(config).get("rollout")
    if not isinstance(recorded, dict):
        return None
    known = {f.name for f in fields(RolloutConfig)} - set(NOT_ADOPTED)
    return config.parent, {k: v for k, v in recorded.items() if k in known}


def describe_adopted(run: Path, adopted: dict[str, Any], defaults: RolloutConfig) -> str:
    """The one line that says a run's rollout settings are in use, naming those that differ
    from the command's defaults."""
    changed = [
        f"{key}={format_value(value)}"
        for key, value in adopted.items()
        if format_value(getattr(defaults, key)) != format_value(value)
    ]
    what = " ".join(changed) if changed else "the same as the defaults"
    return (
        f"rollout settings of the run {run} (its config.yaml): {what}; --no-run-settings for "
        "the defaults, rollout.KEY=VALUE to change one"
    )
