"""Every setting of a config, with its value, default, allowed values and documentation, read
from the dataclasses themselves: `searchrl config show` prints it and `config.reference`
renders the configuration reference from it, so neither can drift from the code.

A field's documentation is the string literal under it in the class body (the convention of
every config module here); Python keeps no such attribute at run time, so it is read from the
class's source with `ast`.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

import yaml

from searchrl.config.checks import Range, Satisfies


@dataclass(frozen=True)
class Setting:
    """One leaf setting of a config, by its dotted key."""

    key: str
    value: Any
    default: Any
    allowed: str
    doc: str

    @property
    def changed(self) -> bool:
        """Whether the value differs from the default of the command it belongs to."""
        return self.value != self.default


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name → its docstring (whitespace collapsed), for `cls` and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # no source (a class made at run time)
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, after in zip(body, [*body[1:], None], strict=True):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            text = getattr(after.value, "value", None) if isinstance(after, ast.Expr) else None
            if isinstance(text, str):
                docs[stmt.target.id] = " ".join(text.split())
    return docs


def class_summary(cls: type) -> str:
    """The first line of a class's docstring."""
    return " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())


ABBREVIATIONS = ("Dr", "e.g", "i.e", "vs", "cf", "etc", "approx", "Fig", "Eq")
"""Words whose trailing dot does not end a sentence."""


def first_sentence(doc: str, limit: int = 160) -> str:
    """The first sentence of a docstring (a '. ' outside brackets, not after an
    abbreviation such as "Dr."), cut at `limit` characters, for one-line listings; the rest
    stays in the reference."""
    depth = 0
    for i, char in enumerate(doc):
        depth += (char in "([{") - (char in ")]}")
        ends = char == "." and depth <= 0 and doc[i + 1 : i + 2] in (" ", "")
        if ends and not doc[:i].endswith(ABBREVIATIONS):
            doc = doc[: i + 1]
            break
    return doc if len(doc) <= limit else doc[: limit - 1].rstrip() + "…"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _bound(rule: Range) -> str:
    """A Range in words: `≥ 1`, `> 0`, `[0, 1]`, `(0, 1]`."""
    low = ("[", rule.ge) if rule.ge is not None else ("(", rule.gt) if rule.gt is not None else None
    high = (
        ("]", rule.le) if rule.le is not None else (")", rule.lt) if rule.lt is not None else None
    )
    if low and high:
        return f"{low[0]}{_num(low[1])}, {_num(high[1])}{high[0]}"
    if low:
        return f"{'≥' if low[0] == '[' else '>'} {_num(low[1])}"
    if high:
        return f"{'≤' if high[0] == ']' else '<'} {_num(high[1])}"
    return "any"


def allowed(annotation: Any) -> str:
    """What a field accepts, in words: `≥ 1`, `[0, 1]`, `grpo | gae`, `true/false`, …"""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *extras = typing.get_args(annotation)
        rules = [_bound(e) if isinstance(e, Range) else e.expected
                 for e in extras if isinstance(e, (Range, Satisfies))]  # fmt: skip
        kind = {int: "integer", float: "number"}.get(base)
        return f"{kind} {' '.join(rules)}" if kind and rules else " ".join(rules) or allowed(base)
    if origin in (typing.Union, types.UnionType):
        options = [allowed(a) for a in typing.get_args(annotation) if a is not type(None)]
        nullable = type(None) in typing.get_args(annotation)
        return " or ".join(options) + (" or null" if nullable else "")
    if origin is typing.Literal:
        return " | ".join(str(a) for a in typing.get_args(annotation))
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if Ellipsis in typing.get_args(annotation) or len(args) == 1:
            return f"list of {allowed(args[0]) if args else 'values'}"
        return f"list of {len(args)}: {allowed(args[0])}"
    names = {bool: "true/false", int: "integer", float: "number", str: "text"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def format_value(value: Any) -> str:
    """A value as it would be written in a `key=value` override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if _reads_back(value) else json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return repr(value)


def _reads_back(text: str) -> bool:
    """Whether `key=text` would be read (as YAML) as this very string."""
    try:
        return bool(text) and yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def settings(config: Any, default: Any | None = None, prefix: str = "") -> list[Setting]:
    """Every leaf setting of `config` (a dataclass instance), depth first in field order.
    `default` is the instance to compare with (the config class's own defaults unless given);
    nested sections compare with the default's sections, so a section whose parent gives it
    other defaults (e.g. evaluation's greedy rollout) is compared with those."""
    cls = type(config)
    default = cls() if default is None else default
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    found: list[Setting] = []
    for item in dataclasses.fields(config):
        value, base = getattr(config, item.name), getattr(default, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += settings(value, base, f"{prefix}{item.name}.")
            continue
        doc = docs.get(item.name, "")
        found.append(Setting(prefix + item.name, value, base, allowed(hints[item.name]), doc))
    return found


def section_classes(cls: type) -> list[type]:
    """`cls` and every config class nested in it, each once, in order of first appearance."""
    seen: list[type] = []

    def visit(klass: type) -> None:
        if klass in seen:
            return
        seen.append(klass)
        for hint in typing.get_type_hints(klass).values():
            if dataclasses.is_dataclass(hint) and isinstance(hint, type):
                visit(hint)

    visit(cls)
    return seen
