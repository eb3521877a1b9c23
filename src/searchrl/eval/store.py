"""The per-sample file of an evaluation: JSON Lines appended whole lines at a time, so a killed
run restarts where it stopped without losing or double-counting a sample.

Guarantees (each tested by killing a real process):
- a batch of rows is written with ONE `write` on an `O_APPEND` descriptor, then fsynced: a
  SIGKILL leaves either none or all of its lines (a power cut can still leave a torn tail);
- on open, a torn tail (bytes after the last newline) is cut off, and rows whose id was already
  seen (two runs racing on one folder) are dropped and the file rewritten atomically;
- a lock file refuses a second process writing to the same folder at the same time.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchrl.utils.errors import SearchRLError


class StoreError(SearchRLError, RuntimeError):
    """The sample file is unusable (a corrupt line in the middle) or locked by another run."""


class BusyError(StoreError):
    """Another process holds the folder's writer lock: the folder is fine, just taken (a
    caller running many evaluations can go on with the others)."""


class SampleStore:
    """`samples.jsonl` in an evaluation folder: `load()` once, then `append(rows)`."""

    def __init__(self, path: Path):
        self.path = path
        self._lock_file: Any = None

    def lock(self) -> None:
        """Take the folder's writer lock (released when the process exits or `unlock`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = (self.path.parent / ".lock").open("w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            handle.close()
            raise BusyError(f"another evaluation is writing to {self.path.parent}") from err
        self._lock_file = handle

    def unlock(self) -> None:
        """Release the writer lock."""
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def load(self) -> list[dict[str, Any]]:
        """Every complete row, first occurrence of each id, in file order. Repairs the file on
        disk (torn tail cut, duplicates dropped) so later appends extend a clean file."""
        if not self.path.is_file():
            return []
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        duplicates = 0
        for number, line in enumerate(raw[:end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise StoreError(f"{self.path}: line {number} is not JSON ({err.msg})") from err
            if row["id"] in seen:
                duplicates += 1
                continue
            seen.add(row["id"])
            rows.append(row)
        if duplicates:
            self._rewrite(rows)
        elif end < len(raw):
            with self.path.open("r+b") as handle:
                handle.truncate(end)
        return rows

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows as whole lines in one write, then fsync."""
        data = b"".join(_line(row) for row in rows)
        if not data:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            if written != len(data):  # a regular file only writes short when the disk is full
                raise StoreError(f"{self.path}: short write ({written} of {len(data)} bytes)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_bytes(b"".join(_line(row) for row in rows))
        os.replace(tmp, self.path)


def _line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Rows of a finished (or interrupted) evaluation's `samples.jsonl`, read-only: torn tail
    ignored, first occurrence of each id kept."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    raw = path.read_bytes()
    for line in raw[: raw.rfind(b"\n") + 1].splitlines():
        if line.strip():
            row = json.loads(line)
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append(row)
    return rows
