"""`searchrl` subcommands for the train stage."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
