"""`searchrl` subcommands for the retrieval stage: `index` (build an index directory from a
corpus), `search` (query an index or a remote server) and `serve` (the `/retrieve` server).
Each parses options into a RetrievalConfig and calls one function of `searchrl.retrieval`."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from searchrl.config import ConfigError, load_config
from searchrl.config.retrieval import RetrievalConfig
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.retrieval.corpus import CorpusError
from searchrl.retrieval.index import KINDS, Kind, build_index, load_index
from searchrl.retrieval.remote import RemoteRetriever
from searchrl.types import Hit

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="YAML file with bm25/dense/hybrid/server keys.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key, e.g. --set dense.index_type=hnsw."),
]


def _config(path: Path | None, overrides: list[str] | None) -> RetrievalConfig:
    return load_config(RetrievalConfig, path, overrides or [])


def _fail(err: Exception) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {err}")
    return typer.Exit(code=1)


def index(
    kind: Annotated[str, typer.Option("--kind", help=f"One of {', '.join(KINDS)}.")],
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus JSONL ({id, contents}).")],
    out: Annotated[Path, typer.Option("--out", help="Index directory to write.")],
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Build a BM25, dense or hybrid index directory from a corpus file."""
    if kind not in KINDS:
        raise typer.BadParameter(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    try:
        kind_: Kind = kind  # type: ignore[assignment]
        build_index(kind_, corpus, out, _config(config, overrides))
    except (RetrievalError, CorpusError, ConfigError) as err:
        raise _fail(err) from None


def _print_results(queries: list[str], results: list[list[Hit]]) -> None:
    console = Console()
    for query, hits in zip(queries, results, strict=True):
        table = Table(title=f"[bold]{query}[/bold]", show_lines=True, expand=True)
        table.add_column("#", justify="right", width=3)
        table.add_column("score", justify="right", width=9)
        table.add_column("id", width=10)
        table.add_column("passage")
        for rank, hit in enumerate(hits, start=1):
            text = hit.document.text
            snippet = text if len(text) <= 300 else text[:300] + "…"
            passage = f"[bold]{hit.document.title}[/bold]\n{snippet}"
            table.add_row(str(rank), f"{hit.score:.3f}", hit.document.id, passage)
        if not hits:
            table.add_row("", "", "", "[dim]no passage matched[/dim]")
        console.print(table)


def search(
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    index_dir: Annotated[Path | None, typer.Option("--index", help="Index directory.")] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="A /retrieve server URL instead of --index.")
    ] = None,
    k: Annotated[int, typer.Option("-k", "--topk", min=1, help="Passages per query.")] = 3,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Search an index directory (or a remote server) and print the ranked passages."""
    if (index_dir is None) == (url is None):
        raise typer.BadParameter("give exactly one of --index DIR or --url URL")
    try:
        settings = _config(config, overrides)
        retriever: Retriever
        if url is not None:
            retriever = RemoteRetriever(replace(settings.remote, url=url))
        else:
            assert index_dir is not None
            retriever = load_index(index_dir, config=settings)
        results = retriever.search(queries, k)
    except (RetrievalError, CorpusError, ConfigError) as err:
        raise _fail(err) from None
    _print_results(queries, results)


def serve(
    index_dir: Annotated[Path, typer.Option("--index", help="Index directory to serve.")],
    host: Annotated[
        str | None, typer.Option(help="Bind address (default 127.0.0.1: loopback only).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (default 8000).")] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Serve an index over HTTP with the Search-R1 `POST /retrieve` contract."""
    from searchrl.retrieval.server import serve as run_server

    extra = [f"server.host={host}"] if host is not None else []
    extra += [f"server.port={port}"] if port is not None else []
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        run_server(index_dir, _config(config, [*(overrides or []), *extra]))
    except (RetrievalError, ConfigError) as err:
        raise _fail(err) from None


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("index")(index)
    app.command("search")(search)
    app.command("serve")(serve)
