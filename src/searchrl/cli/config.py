"""`searchrl config show NAME` (every resolved setting of a preset, a YAML file, a run folder
or a command, with its one-line meaning) and `searchrl config list` (the shipped presets)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from searchrl.cli.options import OverridesArgument, SetOption, joined
from searchrl.config.describe import first_sentence, format_value, settings
from searchrl.config.errors import OverrideError
from searchrl.config.loading import build, parse_overrides, read_yaml
from searchrl.config.presets import is_path, preset_names, presets_dir, resolve_config
from searchrl.config.roots import ROOTS, Root, detect, root_named, run_settings

app = typer.Typer(help="Settings: what a preset, a run or a command uses, and what it means.")
VALUE_WIDTH = 24
"""Values longer than this push their line's description to the right."""


def _source(name: str) -> tuple[dict[str, Any], str, Root | None]:
    """The settings `name` stands for, where they come from, and the command they belong to
    when the name says it (a command's name)."""
    path = Path(name)
    if path.is_dir():
        return run_settings(path), f"the run {path}", None
    if is_path(name) or name in preset_names():
        config = resolve_config(name)
        return read_yaml(config), str(config), None
    root = root_named(name)
    if root is not None:
        return {}, "the defaults", root
    raise OverrideError(
        f"{name!r} is no preset, YAML file, run folder or command (presets: "
        f"{', '.join(preset_names())}; commands: {', '.join(r.name for r in ROOTS)})"
    )


@app.command("show")
def show(
    name: Annotated[
        str,
        typer.Argument(
            help="A preset (tiny_cpu_grpo), a YAML file, a run folder (runs/grpo: its "
            "config.yaml) or a command (train, sft, eval, rollout, retrieval, world, …).",
            show_default=False,
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option(help="Read the settings as this command's (when the name cannot tell)."),
    ] = None,
    changed: Annotated[
        bool, typer.Option("--changed", help="Only the settings that differ from the defaults.")
    ] = False,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Every resolved setting, one per line: key, value and its one-line meaning; `*` marks a
    value that differs from the command's defaults. key=value arguments are applied first,
    exactly as the command itself would apply them."""
    data, source, root = _source(name)
    if kind is not None:
        root = root_named(kind)
        if root is None:
            raise OverrideError(f"--kind: unknown command {kind!r}")
    root = root or detect(data)
    config = build(root.cls, data, parse_overrides(joined(sets, overrides)))
    rows = [s for s in settings(config) if s.changed or not changed]
    typer.echo(
        f"# {source}: settings of `searchrl {' / '.join(root.commands)}`; * = not the default"
    )
    values = [format_value(s.value) for s in rows]
    width = max((len(s.key) for s in rows), default=0)
    pad = min(VALUE_WIDTH, max((len(v) for v in values), default=0))
    for s, value in zip(rows, values, strict=True):
        typer.echo(f"{'*' if s.changed else ' '} {s.key:<{width}}  {value:<{pad}}  "
                   f"{first_sentence(s.doc)}".rstrip())  # fmt: skip


@app.command("list")
def list_presets() -> None:
    """The shipped presets (`--config NAME`), the command each is for and what it is."""
    rows = []
    for name in preset_names():
        path = presets_dir() / f"{name}.yaml"
        summary = next(
            (line.lstrip("# ").strip() for line in path.read_text().splitlines()
             if line.startswith("#")), "",
        )  # fmt: skip
        rows.append((name, detect(read_yaml(path)).name, summary))
    width = max(len(name) for name, _, _ in rows)
    for name, command, summary in rows:
        typer.echo(f"{name:<{width}}  {command:<5}  {summary}")
    typer.echo(f"(in {presets_dir()}; `searchrl config show NAME` prints every setting)")


def register(root: typer.Typer) -> None:
    """Attach `config` and its subcommands to the top-level app."""
    root.add_typer(app, name="config")
