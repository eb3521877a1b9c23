"""The `searchrl` command. Each subcommand module parses its options and calls one function;
no logic lives here."""

from __future__ import annotations

import typer

from searchrl.cli import data, demo, retrieval, rollout, train

app = typer.Typer(
    name="searchrl",
    help="Train and evaluate LLMs that reason while calling a search engine (Search-R1/R2).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for module in (retrieval, data, rollout, train, demo):
    module.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
