"""`searchrl` subcommands for the data stage: the synthetic world, the benchmark registry,
corpus-coverage statistics and format conversion. Each parses options and calls one function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from searchrl.cli.common import ForceOption, require_file, wide_console
from searchrl.cli.options import SeedOption, SetOption, joined, settings
from searchrl.config.data import WORLD_PRESETS, WorldConfig, world_preset
from searchrl.config.errors import OverrideError
from searchrl.config.loading import to_dict
from searchrl.config.presets import is_path
from searchrl.data.benchmarks import BENCHMARKS, DataError
from searchrl.data.mix import convert
from searchrl.data.stats import QAStats, file_stats, load_corpus_index
from searchrl.data.world import generate_world, write_world
from searchrl.utils.output import atomic_directory, atomic_path, check_output
from searchrl.utils.progress import progress_bar


def world(
    out: Annotated[Path, typer.Option(help="Directory for corpus, splits and references.")],
    seed: SeedOption = None,
    config: Annotated[
        str,
        typer.Option(
            "--config",
            "--preset",
            help="Size preset (test, demo or large) or a YAML file of world settings.",
        ),
    ] = "demo",
    force: ForceOption = False,
    sets: SetOption = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="KEY=VALUE",
            help="World settings, e.g. num_entities=2000 same_name_rate=0.2 "
            "(`searchrl config show world`).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Generate a synthetic search world and its reference trajectories (BM25 top-k)."""
    if config in WORLD_PRESETS:
        base, config_file = to_dict(world_preset(config)), None
    elif is_path(config):
        base, config_file = {}, config
    else:
        raise OverrideError(
            f"--config: unknown world preset {config!r}; choose one of "
            f"{', '.join(WORLD_PRESETS)} or give a YAML file"
        )
    generated_config = settings(
        WorldConfig, config_file, joined(sets, overrides), {"seed": seed}, base=base
    )
    check_output(out, force=force, kind="directory")
    try:
        generated = generate_world(generated_config)
    except ValueError as err:  # the generator's only refusal: too few questions possible
        raise DataError(f"cannot generate this world: {err}") from None
    with atomic_directory(out, force=force) as tmp:
        manifest = write_world(generated, tmp)
    console = wide_console()
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


def list_benchmarks() -> None:
    """Show the benchmark registry (eval split, in/out of domain, general/multi-hop)."""
    table = Table(title="benchmarks")
    for column in ("name", "eval split", "domain", "type", "description"):
        table.add_column(column)
    for b in BENCHMARKS:
        domain = "in-domain" if b.in_domain else "out-of-domain"
        table.add_row(b.name, b.eval_split, domain, b.category, b.description)
    wide_console().print(table)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def stats(
    files: Annotated[list[Path], typer.Argument(help="QA files (FlashRAG JSONL or parquet).")],
    corpus: Annotated[
        Path | None, typer.Option(help="Corpus JSONL; adds answer coverage columns.")
    ] = None,
) -> None:
    """Sizes, lengths, hop counts and the share of questions whose answer is in the corpus."""
    for path in files:
        require_file(path, "QA file")
    if corpus is not None:
        require_file(corpus, "corpus file")
    table = Table(title="QA statistics" + (f" (corpus {corpus.name})" if corpus else ""))
    columns = ("file", "rows", "q words", "answers/q", "answer words", "hops")
    for column in (*columns, "substring", "whole word"):
        table.add_column(column, justify="left" if column in ("file", "hops") else "right")
    index = None
    if corpus is not None:
        with progress_bar("reading corpus", corpus.stat().st_size, unit="bytes") as advance:
            index = load_corpus_index(corpus, advance)
    with progress_bar("statistics", len(files), unit="files") as advance:
        rows = file_stats(files, index=index, progress=advance)
    for row in rows:
        table.add_row(*_stats_cells(row))
    wide_console().print(table)


def _stats_cells(row: QAStats) -> list[str]:
    hops = " ".join(f"{h}:{n}" for h, n in row.hops.items()) or "-"
    return [
        row.name,
        str(row.rows),
        f"{row.question_words:.1f}",
        f"{row.answers_per_question:.2f}",
        f"{row.answer_words:.2f}",
        hops,
        _percent(row.substring),
        _percent(row.whole_word),
    ]


def convert_command(
    src: Annotated[Path, typer.Argument(help="Input: .jsonl (FlashRAG) or .parquet.")],
    dst: Annotated[Path, typer.Argument(help="Output: .parquet or .jsonl.")],
    split: Annotated[str, typer.Option(help="extra_info.split of parquet rows.")] = "train",
    source: Annotated[
        str | None, typer.Option(help="Source of a JSONL file (default: its name).")
    ] = None,
    force: ForceOption = False,
) -> None:
    """Convert FlashRAG JSONL ↔ Search-R1 training parquet."""
    require_file(src, "input file")
    check_output(dst, force=force, kind="file")
    with atomic_path(dst, force=force) as tmp:
        count = convert(src, tmp, split, source)
    wide_console().print(f"{count} questions: {src} → {dst}")


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("world")(world)
    data_app = typer.Typer(help="QA benchmarks: registry, statistics, conversion.")
    data_app.command("list")(list_benchmarks)
    data_app.command("stats")(stats)
    data_app.command("convert")(convert_command)
    app.add_typer(data_app, name="data")
