"""The `searchrl` command. Each subcommand module parses its options and calls one function;
no logic lives here. Every command runs inside the error boundary of `cli.boundary` (one line
on stderr and a distinct exit code per kind of failure) with the torch thread count chosen
once by `utils.threads`."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from searchrl import __version__
from searchrl.cli import config, data, demo, eval, report, retrieval, rollout, train
from searchrl.cli.boundary import DEBUG_ENV, SearchRLGroup
from searchrl.utils.memory import release_freed_memory
from searchrl.utils.quiet import quiet_libraries
from searchrl.utils.threads import apply_threads

app = typer.Typer(
    name="searchrl",
    cls=SearchRLGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"searchrl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help=f"Show the traceback of an unexpected error (or {DEBUG_ENV}=1)."
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Train and evaluate LLMs that reason while calling a search engine (Search-R1/R2).

    Every command reads its settings from an optional `--config PRESET|FILE`, its options
    and `KEY=VALUE` arguments, in that order; `searchrl config show COMMAND` lists them."""


for module in (retrieval, data, rollout, train, demo, eval, report, config):
    module.register(app)


def main() -> None:
    """Console-script entry point: quiet the libraries (`utils.quiet`; `--debug` or
    SEARCHRL_VERBOSE=1 keeps them talking), let freed tensors go back to the system
    (`utils.memory`), choose torch's thread count, run the command."""
    quiet_libraries(verbose="--debug" in sys.argv or bool(os.environ.get(DEBUG_ENV)))
    release_freed_memory()
    apply_threads()
    app()
