"""`searchrl index` and `searchrl search` through typer, on a real corpus file and index."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from searchrl.cli import app as searchrl_app


def app() -> typer.Typer:
    """The real `searchrl` app, error boundary included."""
    return searchrl_app


def flat(output: str) -> str:
    """Rich wraps long lines at the terminal width; compare text with whitespace collapsed."""
    return " ".join(output.split())


def test_index_then_search(corpus_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "idx"
    built = runner.invoke(
        app(),
        ["index", "--kind", "bm25", "--corpus", str(corpus_file), "--out", str(out),
         "--set", "bm25.k1=1.2"],
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    assert "built bm25 index of 8 passages" in flat(built.output)
    assert (out / "manifest.json").is_file()
    found = runner.invoke(app(), ["search", "--index", str(out), "-k", "1", "Guido van Rossum"])
    assert found.exit_code == 0, found.output
    assert "Python (programming language)" in found.output


def test_errors_are_messages_not_tracebacks(corpus_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app(), ["search", "--index", str(tmp_path), "tea"])
    assert missing.exit_code == 1 and "not an index directory" in flat(missing.output)
    bad_key = runner.invoke(
        app(),
        ["index", "--kind", "bm25", "--corpus", str(corpus_file), "--out", str(tmp_path / "x"),
         "--set", "bm25.k3=1"],
    )  # fmt: skip
    assert bad_key.exit_code == 2 and "unknown config key(s) bm25.k3" in flat(bad_key.output)
    bad_kind = runner.invoke(
        app(), ["index", "--kind", "splade", "--corpus", str(corpus_file), "--out", "x"]
    )
    assert bad_kind.exit_code == 2
    both = runner.invoke(app(), ["search", "--index", "a", "--url", "http://b", "tea"])
    assert both.exit_code == 2
