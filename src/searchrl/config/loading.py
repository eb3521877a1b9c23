"""YAML + `key=value` overrides → frozen dataclasses, with errors that name the bad key.

`from_dict` converts and type-checks every value, then runs `checks.check_config` on the
finished config, so every config built from a file or the command line has its ranges checked
(see `searchrl.config.checks` for how fields declare them)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from searchrl.config.checks import check_config
from searchrl.config.errors import ConfigError

__all__ = ["ConfigError", "from_dict", "load_config", "to_dict"]

T = TypeVar("T")


def _convert(value: Any, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return _build(annotation, value, f"{key}.")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError("; ".join(errors))
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {list(args)}")
        return value
    if origin in (tuple, list):
        if isinstance(value, str) and args in ((str, Ellipsis), (str,)):
            value = [value]  # `data.train_files=a.parquet`: a list of one path
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        fixed = [a for a in args if a is not Ellipsis] if Ellipsis not in args else []
        if len(fixed) > 1 and len(value) != len(fixed):
            raise ConfigError(f"{key}: expected {len(fixed)} values, got {len(value)}")
        inner = args[0] if args else Any
        return tuple(_convert(v, inner, key) for v in value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads `1e-5` (no dot) as a string; accept what Python reads as a number.
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        if value is None:  # `data.index_dir=` (or `index_dir:` in YAML) clears the path
            return ""
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _build(cls: type[T], data: Any, prefix: str) -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(names), n=1)
        hint = f"; did you mean {prefix}{close[0]}?" if close else ""
        raise ConfigError(f"unknown config key(s) {', '.join(prefix + u for u in unknown)}{hint}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {
        k: _convert(_onto_default(fields[k], v), hints[k], prefix + k) for k, v in data.items()
    }
    return cls(**kwargs)


def _onto_default(field: dataclasses.Field[Any], value: Any) -> Any:
    """A partial section is applied on top of its field's default: `rl.steps=5` on a
    `DemoConfig` keeps the demo's own `rl` settings (its `default_factory`) instead of falling
    back to every `TrainConfig` class default."""
    if not isinstance(value, dict) or field.default_factory is dataclasses.MISSING:
        return value
    default = field.default_factory()
    if not dataclasses.is_dataclass(default):
        return value
    return _deep_merge(to_dict(default), value)


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        inner = base.get(key)
        both = isinstance(value, dict) and isinstance(inner, dict)
        merged[key] = _deep_merge(inner, value) if both else value  # type: ignore[arg-type]
    return merged


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build `cls` from a nested dict; unknown keys are an error, missing keys take defaults.
    Then every field's range is checked (`check_config`); `prefix` (e.g. `"rollout."`) is put
    in front of the key in every message."""
    config = _build(cls, data, prefix)
    check_config(config, prefix)
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples become lists) suitable for YAML."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    if not all(parents) or not leaf:
        raise ConfigError(f"override key {dotted!r} has an empty part")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
    node[leaf] = value


def parse_value(raw: str, key: str) -> Any:
    """An override's value parsed as YAML (`1e-6`, `true`, `[0, 1]`, `name`)."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{key}: cannot parse {raw!r} ({problem})") from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML config file as a mapping, with one-line errors for every way it can be bad."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{path}: not valid YAML: {problem}{where}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the config file ({err})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return loaded


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Load a YAML file (optional) into `cls`, then apply `a.b=value` overrides, where each
    value is parsed as YAML (`lr=1e-6`, `use_lora=true`, `name=foo`)."""
    data: dict[str, Any] = read_yaml(Path(path)) if path is not None else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value")
        _set_path(data, key.strip(), parse_value(raw, key.strip()))
    return from_dict(cls, data)
