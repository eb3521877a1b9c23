"""Outputs are written whole or not at all, and never replace something without --force."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from searchrl.utils.errors import OutputError
from searchrl.utils.output import atomic_directory, atomic_file, atomic_path, check_output


def test_refuses_existing_outputs_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a").write_text("x")
    (tmp_path / "f.jsonl").write_text("x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OutputError, match="is not empty; pass --force"):
        check_output(tmp_path / "run", kind="directory")
    with pytest.raises(OutputError, match="already exists; pass --force"):
        check_output(tmp_path / "f.jsonl")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        check_output(tmp_path / "f.jsonl", kind="directory", force=True)
    with pytest.raises(OutputError, match="is a directory; give a file name"):
        check_output(tmp_path / "run", force=True)
    with pytest.raises(OutputError, match="is not a directory"):
        check_output(tmp_path / "f.jsonl" / "x")
    check_output(tmp_path / "run", kind="directory", force=True)
    check_output(tmp_path / "empty", kind="directory")
    check_output(tmp_path / "new" / "deeper" / "x.jsonl")


def test_a_failed_directory_build_leaves_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    with atomic_directory(target) as tmp:
        (tmp / "manifest.json").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target, force=True) as tmp:
        (tmp / "manifest.json").write_text("half")
        raise RuntimeError("build failed")
    assert (target / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    with atomic_directory(target, force=True) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert (target / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_a_failed_file_write_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("old\n")
    with pytest.raises(KeyError), atomic_file(target, force=True) as handle:
        handle.write("partial")
        raise KeyError("boom")
    assert target.read_text() == "old\n"
    with atomic_path(target, force=True) as tmp:
        assert tmp.suffix == ".jsonl" and tmp.parent == tmp_path
        tmp.write_text("new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_disk_full_is_one_clear_error_and_the_old_file_stays(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("old\n")
    with pytest.raises(OutputError) as err, atomic_file(target, force=True):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / ".t.tmp"))
    assert str(err.value) == (
        f"cannot write {target}: no space left on device; it was left as it was before this command"
    )
    assert target.read_text() == "old\n"


def test_temporaries_of_killed_writers_are_cleaned_up(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    code = (
        "import os, sys\n"
        "from searchrl.utils.output import atomic_directory\n"
        "with atomic_directory(sys.argv[1]) as tmp:\n"
        "    (tmp / 'part').write_text('x')\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert [p.name.startswith(".idx.tmp-") for p in tmp_path.iterdir()] == [True]
    with atomic_directory(target) as tmp:
        (tmp / "manifest.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
