"""Valid ranges and choices of config fields, declared next to the field and checked in one
place, `check_config`, which `from_dict`/`load_config` run on every config they build.

How to declare them (for anyone adding a config class):

1. Put the constraint in the field's type with `typing.Annotated`; the aliases below cover the
   common cases, and the loader still sees the plain type::

       @dataclass(frozen=True)
       class MyConfig:
           topk: PositiveInt = 3
           '''Passages per query.'''
           dropout: Fraction = 0.1
           '''Share of units dropped.'''
           beams: Annotated[int, Range(ge=1, le=64)] = 4
           '''Beam width.'''

   Constraints inside `X | None` apply when the value is not None, inside `tuple[X, ...]` to
   every element. `Literal[...]` fields need nothing more: the loader checks their choices.
2. Rules that involve several fields go in an optional method `validate(self) -> None` that
   raises `ConfigError("field: what is wrong")`; `check_config` finds it on every (nested)
   config and puts the section path in front of the message.

Every message names the field with its full dotted path (`rollout.topk: must be at least 1,
got -1`), the way a user would write the override that fixes it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from searchrl.config.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """Bounds of a number: `ge`/`le` inclusive, `gt`/`lt` exclusive; None = unbounded."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value`, or None when it is in range."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        if value != value:  # NaN compares false with everything
            return "must be a number, got nan"
        rules = (
            (self.ge, lambda b: value >= b, "at least"),
            (self.gt, lambda b: value > b, "greater than"),
            (self.le, lambda b: value <= b, "at most"),
            (self.lt, lambda b: value < b, "less than"),
        )
        for bound, ok, words in rules:
            if bound is not None and not ok(bound):
                return f"must be {words} {_number(bound)}, got {value!r}"
        return None


@dataclass(frozen=True)
class Satisfies:
    """A rule that is not a range: `test(value)` must hold; `expected` says what is allowed."""

    test: Callable[[Any], bool]
    expected: str

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value`, or None when it passes."""
        return None if self.test(value) else f"must be {self.expected}, got {value!r}"


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
Fraction = Annotated[float, Range(ge=0, le=1)]
"""A share or probability in [0, 1]."""
Port = Annotated[int, Range(ge=1, le=65535)]
MAX_SEED = 2**32 - 1
Seed = Annotated[int, Range(ge=0, le=MAX_SEED)]
"""A random seed: NumPy takes only these (a negative one would fail deep inside a run)."""
NonEmptyStr = Annotated[str, Satisfies(lambda v: bool(v.strip()), "a non-empty string")]
HttpUrl = Annotated[
    str, Satisfies(lambda v: re.match(r"^https?://[^/\s]+", v) is not None, "an http(s):// URL")
]
UrlOrEmpty = Annotated[
    str,
    Satisfies(
        lambda v: v == "" or re.match(r"^https?://[^/\s]+", v) is not None,
        'an http(s):// URL or "" (not set)',
    ),
]
"""A URL that may be left unset; a `validate` hook says when it is required."""
Weights = tuple[NonNegativeFloat, ...]
"""Relative weights; pair with `positive_total` in `validate` so they cannot all be 0."""


def positive_total(name: str, weights: tuple[float, ...]) -> None:
    """Raise unless `weights` (already checked to be ≥ 0) sum to more than zero."""
    if sum(weights) <= 0:
        raise ConfigError(f"{name}: at least one weight must be positive, got {list(weights)}")


def _problems(annotation: Any, value: Any) -> list[str]:
    """Every constraint `annotation` declares that `value` breaks."""
    if typing.get_origin(annotation) is Annotated:
        base, *extras = typing.get_args(annotation)
        found = [p for c in extras if hasattr(c, "problem") and (p := c.problem(value))]
        return found + _problems(base, value)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return []
        options = [_problems(a, value) for a in typing.get_args(annotation) if a is not type(None)]
        return [] if any(not o for o in options) else options[0]
    if origin in (tuple, list) and isinstance(value, (tuple, list)):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        inners = args if len(args) == len(value) else args[:1] * len(value)
        return [p for inner, v in zip(inners, value, strict=False) for p in _problems(inner, v)]
    return []


def check_config(config: Any, prefix: str = "") -> None:
    """Check every declared constraint and `validate` hook of `config` and its nested
    configs; raise a ConfigError naming the first bad field by its dotted path."""
    hints = typing.get_type_hints(type(config), include_extras=True)
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        problems = _problems(hints.get(item.name, Any), value)
        if problems:
            raise ConfigError(f"{prefix}{item.name}: {problems[0]}")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_config(value, f"{prefix}{item.name}.")
    hook = getattr(config, "validate", None)
    if callable(hook):
        try:
            hook()
        except ConfigError as err:
            raise ConfigError(f"{prefix}{err}") from None
