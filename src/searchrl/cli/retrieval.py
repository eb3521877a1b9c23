"""`searchrl` subcommands for the retrieval stage: `index` (build an index directory from a
corpus), `search` (query an index or a remote server) and `serve` (the `/retrieve` server, over
one of our index directories or a Search-R1/FlashRAG faiss index). Each parses options into a
RetrievalConfig and calls one function of `searchrl.retrieval`; errors end in the boundary of
`searchrl.cli.boundary`."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from searchrl.cli.common import ForceOption, one_of, require_file
from searchrl.config import check_config, load_config
from searchrl.config.retrieval import RetrievalConfig
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.index import KINDS, Kind, build_index, load_index, shard_directories
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


def index(
    kind: Annotated[str, typer.Option("--kind", help=f"One of {', '.join(KINDS)}.")],
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus JSONL ({id, contents}).")],
    out: Annotated[Path, typer.Option("--out", help="Index directory to write.")],
    config: ConfigOption = None,
    overrides: SetOption = None,
    force: ForceOption = False,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            help="Split the corpus into this many shard indexes that answer together exactly "
            "like one (serve them with `searchrl serve --index OUT`).",
        ),
    ] = 1,
    faiss_index: Annotated[
        Path | None,
        typer.Option(
            "--faiss-index",
            help="With --kind dense: link a faiss index built elsewhere over --corpus (Search-R1's "
            "e5_Flat.index over wiki-18.jsonl; --set dense.encoder=intfloat/e5-base-v2) instead "
            "of encoding: only the manifest is written.",
        ),
    ] = None,
) -> None:
    """Build a BM25, dense or hybrid index directory from a corpus file.

    The directory is written in full next to the target and renamed into place, so a failed
    rebuild leaves a working index as it was; a non-empty target needs --force."""
    if kind not in KINDS:
        raise typer.BadParameter(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    settings = _config(config, overrides)
    if faiss_index is not None:
        from searchrl.retrieval.external import link_faiss_index
        from searchrl.utils.output import check_output

        if kind != "dense":
            raise typer.BadParameter("--faiss-index links a dense index: use --kind dense")
        check_output(out, force=force, kind="directory")
        link_faiss_index(faiss_index, corpus, out, settings.dense)
        typer.echo(f"linked {faiss_index} over {corpus} ({settings.dense.encoder}) at {out}")
        return
    kind_: Kind = kind  # type: ignore[assignment]
    build_index(
        kind_, require_file(corpus, "corpus file"), out, settings, force=force, shards=shards
    )


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
    one_of(index_dir, url)
    settings = _config(config, overrides)
    retriever: Retriever
    if url is not None:
        retriever = RemoteRetriever(replace(settings.remote, url=url))
        check_config(retriever.config, "remote.")
    else:
        assert index_dir is not None
        retriever = load_index(index_dir, config=settings)
    _print_results(queries, retriever.search(queries, k))


def serve(
    index_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--index",
            help="Index directory to serve; repeat it to serve several shards as one (each in "
            "its own process, top-k merged).",
        ),
    ] = None,
    shard_urls: Annotated[
        list[str] | None,
        typer.Option(
            "--shard-url",
            help="A shard already served elsewhere (http://host:port/retrieve); repeatable.",
        ),
    ] = None,
    faiss_index: Annotated[
        Path | None,
        typer.Option(
            "--faiss-index", help="Or: a faiss index built by Search-R1/FlashRAG (e5_Flat.index)."
        ),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option("--corpus", help="With --faiss-index: its JSONL corpus (wiki-18.jsonl)."),
    ] = None,
    encoder: Annotated[
        str | None,
        typer.Option(
            "--encoder", help="With --faiss-index: the encoder that built it (intfloat/e5-base-v2)."
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Bind address (default 127.0.0.1: loopback only).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="TCP port (default 8000).")
    ] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Serve an index over HTTP with the Search-R1 `POST /retrieve` contract.

    Several --index (or --shard-url) serve the shards of one corpus as one index: every local
    shard runs in its own `searchrl serve` process and each query gets the merged top k."""
    from searchrl.retrieval.server import serve as serve_index
    from searchrl.retrieval.server import serve_faiss, serve_shards

    dirs = [d for given in index_dirs or [] for d in shard_directories(given)]
    urls = shard_urls or []
    external = (faiss_index, corpus, encoder)
    local = bool(dirs or urls)
    if local and any(v is not None for v in external):
        raise typer.BadParameter("give --index DIR, or --faiss-index with --corpus and --encoder")
    if not local and any(v is None for v in external):
        raise typer.BadParameter("give --index DIR, or all of --faiss-index, --corpus, --encoder")
    settings = _config(config, overrides)
    server = replace(
        settings.server,
        host=settings.server.host if host is None else host,
        port=settings.server.port if port is None else port,
    )
    dense = replace(settings.dense, encoder=encoder) if encoder is not None else settings.dense
    settings = replace(settings, server=server, dense=dense)
    check_config(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if len(dirs) + len(urls) > 1 or urls:
        shard_args = ["--config", str(config)] if config is not None else []
        shard_args += [arg for o in overrides or [] for arg in ("--set", o)]
        serve_shards(dirs, urls, settings, shard_args)
    elif dirs:
        serve_index(dirs[0], settings)
    else:
        assert faiss_index is not None and corpus is not None
        serve_faiss(faiss_index, corpus, settings)


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("index")(index)
    app.command("search")(search)
    app.command("serve")(serve)
