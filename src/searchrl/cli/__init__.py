"""The `searchrl` command. Each subcommand module parses its options and calls one function;
no logic lives here. Every command runs inside the error boundary of `cli.boundary` (one line
on stderr and a distinct exit code per kind of failure) with the torch thread count chosen
once by `utils.threads`."""

from __future__ import annotations

from typing import Annotated

import typer

from searchrl.cli import data, demo, eval, report, retrieval, rollout, train
from searchrl.cli.boundary import DEBUG_ENV, SearchRLGroup
from searchrl.utils.threads import apply_threads

app = typer.Typer(
    name="searchrl",
    cls=SearchRLGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help=f"Show the traceback of an unexpected error (or {DEBUG_ENV}=1)."
        ),
    ] = False,
) -> None:
    """Train and evaluate LLMs that reason while calling a search engine (Search-R1/R2)."""


for module in (retrieval, data, rollout, train, demo, eval, report):
    module.register(app)


def main() -> None:
    """Console-script entry point: choose torch's thread count, then run the command."""
    apply_threads()
    app()
