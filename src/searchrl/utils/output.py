"""Outputs that are never half-written and never silently overwritten.

Every command that writes a file or a directory goes through here:

- `check_output(path, force=...)` fails at once, before any slow work, when the target exists
  (unless `force`), is the wrong kind (a file where a directory goes, or the reverse), or its
  parent cannot be created or written;
- `atomic_directory(path)` yields a hidden temporary directory next to the target; only when
  the block finishes without an exception is it renamed into place (a previous target, allowed
  by `force`, is moved aside first and deleted after). A failure or a kill leaves the previous
  target exactly as it was;
- `atomic_path(path)` / `atomic_file(path)` do the same for one file with `os.replace`, which is
  atomic on POSIX: readers see the old file or the new one, never a prefix.

Temporaries are named `.<name>.tmp-<pid>-<random>`; ones left by a killed process are removed
the next time the same target is written, so repeated kills do not fill the disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from searchrl.utils.errors import OutputError

Kind = Literal["file", "directory"]


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def check_output(path: str | Path, *, force: bool = False, kind: Kind = "file") -> Path:
    """Refuse an unsafe target with an OutputError naming it; returns the path unchanged."""
    path = Path(path)
    if path.exists():
        if kind == "directory" and not path.is_dir():
            raise OutputError(f"{path} exists and is a file, not a directory")
        if kind == "file" and path.is_dir():
            raise OutputError(f"{path} is a directory; give a file name")
        occupied = any(path.iterdir()) if path.is_dir() else True
        if occupied and not force:
            what = "is not empty" if path.is_dir() else "already exists"
            raise OutputError(f"{path} {what}; pass --force to replace it")
    anchor = _nearest_existing(path.parent)
    if not anchor.is_dir():
        raise OutputError(f"cannot write {path}: {anchor} is not a directory")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: {anchor} is not writable")
    return path


def _temporary_name(target: Path) -> Path:
    stem, suffix = (target.stem, target.suffix) if target.suffix else (target.name, "")
    return target.parent / f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (another user's counts: not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(target: Path) -> None:
    """Delete temporaries of `target` whose writing process no longer exists."""
    stem = target.stem if target.suffix else target.name
    prefix = f".{stem}.tmp-"
    if not target.parent.is_dir():
        return
    for stale in target.parent.glob(f"{prefix}*"):
        pid = stale.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.EFBIG, errno.ENOENT, errno.ENOTDIR})  # fmt: skip


@contextlib.contextmanager
def _explained(target: Path) -> Iterator[None]:
    """An OSError from writing (disk full, read-only, vanished directory) becomes one
    OutputError that names the target, not the hidden temporary, and says it is unchanged."""
    try:
        yield
    except OSError as err:
        if err.errno not in WRITE_ERRORS:
            raise
        reason = "no space left on device" if err.errno == errno.ENOSPC else err.strerror
        raise OutputError(
            f"cannot write {target}: {reason}; it was left as it was before this command"
        ) from err


def _prepare(target: Path, force: bool, kind: Kind) -> None:
    check_output(target, force=force, kind=kind)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create {target.parent}: {err.strerror}") from None
    remove_stale_temporaries(target)


@contextlib.contextmanager
def atomic_directory(path: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes `path` when the block succeeds."""
    target = Path(path)
    _prepare(target, force, "directory")
    tmp = _temporary_name(target)
    try:
        with _explained(target):
            tmp.mkdir()
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    aside = None
    if target.exists():
        aside = _temporary_name(target)
        os.replace(target, aside)
    try:
        os.replace(tmp, target)
    except BaseException:
        if aside is not None:
            os.replace(aside, target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary file path (same directory and suffix) that replaces `path` when the
    block succeeds; for writers that take a path rather than a handle."""
    target = Path(path)
    _prepare(target, force, "file")
    tmp = _temporary_name(target)
    try:
        with _explained(target):
            tmp.touch(exist_ok=False)
            yield tmp
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_file(
    path: str | Path, *, force: bool = False, binary: bool = False
) -> Iterator[IO[str] | IO[bytes]]:
    """Yield an open handle whose content replaces `path` (flushed to disk) on success."""
    with atomic_path(path, force=force) as tmp:
        mode = "wb" if binary else "w"
        with open(tmp, mode, **({} if binary else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
