"""Helpers the subcommands share: the `--force` option, checks of input paths that run before
anything heavy is loaded, and the default model of the interactive commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from searchrl.utils.errors import SearchRLError

ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace the output if it already exists.")
]
RUNS_DIR = Path("runs")
"""Where `searchrl demo`, `train` and `sft` write their run folders by default (the README)."""


def wide_console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a pipe or a
    log file (benchmarks keep every stage's output): 160 columns there, the terminal's width
    on a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


class InputError(SearchRLError):
    """A path given on the command line does not exist or is the wrong kind."""


def require_file(path: Path, what: str) -> Path:
    """`path` if it is an existing file, else an InputError naming `what` it should be."""
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    if not path.is_file():
        raise InputError(f"{what} must be a file, but {path} is a directory")
    return path


def require_dir(path: Path, what: str) -> Path:
    """`path` if it is an existing directory, else an InputError."""
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    if not path.is_dir():
        raise InputError(f"{what} must be a directory, but {path} is a file")
    return path


def one_of(index: Path | None, url: str | None) -> None:
    """Commands that search need exactly one search engine."""
    if (index is None) == (url is None):
        raise typer.BadParameter("give exactly one of --index DIR or --url URL")


def newest_trained_model(root: Path = RUNS_DIR) -> Path | None:
    """The most recently written `model/` directory of a run under `root` (`searchrl demo`,
    `train` or `sft` export one when they finish), or None when there is none."""
    if not root.is_dir():
        return None
    found = [
        config
        for pattern in ("*/model/config.json", "*/*/model/config.json")
        for config in root.glob(pattern)
    ]
    newest = max(found, key=lambda config: config.stat().st_mtime, default=None)
    return None if newest is None else newest.parent
