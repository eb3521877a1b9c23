"""`searchrl` subcommands for the data stage: the synthetic world, the benchmark registry,
corpus-coverage statistics and format conversion. Each parses options and calls one function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from searchrl.config.data import WorldConfig, world_preset
from searchrl.config.loading import from_dict, to_dict
from searchrl.data.world import generate_world, write_world


def world(
    out: Annotated[Path, typer.Option(help="Directory for corpus, splits and references.")],
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same files.")] = 0,
    preset: Annotated[str, typer.Option(help="Size preset: test, demo or large.")] = "demo",
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="WorldConfig overrides, e.g. num_entities=2000 same_name_rate=0.2"),
    ] = None,
) -> None:
    """Generate a synthetic search world and its reference trajectories (BM25 top-k)."""
    values = {**to_dict(world_preset(preset)), "seed": seed, **_parse_overrides(overrides or [])}
    config = from_dict(WorldConfig, values)
    manifest = write_world(generate_world(config), out)
    console = Console()
    console.print(
        f"{manifest['entities']} entities, {manifest['passages']} passages, "
        f"questions {manifest['questions']} → {out}"
    )
    table = Table(title="scripted solver exact match (BM25)")
    table.add_column("split")
    hops = sorted({h for s in manifest["solver_em_by_hops"].values() for h in s})
    for h in hops:
        table.add_column(f"{h} hop")
    for split, by_hops in manifest["solver_em_by_hops"].items():
        table.add_row(split, *(f"{by_hops[h]:.3f}" if h in by_hops else "-" for h in hops))
    console.print(table)


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs, each value parsed as YAML (`hop_weights=[0,1,1,1]`)."""
    parsed = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not of the form key=value")
        parsed[key.strip()] = yaml.safe_load(raw)
    return parsed


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("world")(world)
