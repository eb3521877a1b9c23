"""Scratch directories in RAM for an engine's weights, removed even after their owner died.

A vLLM engine reads the trainer's weights from a directory in /dev/shm, which is memory: a run
that exits normally (or is stopped with SIGTERM) removes it, but a run that is SIGKILLed (the
OOM killer, a scheduler's hard stop, `kill -9`) cannot, and its copy holds RAM until the next
reboot: 300 MB for the 135M demo model, 15 GB for a 7B model in bf16. Here 30 such folders had
piled up in a day of test and benchmark runs. So each directory records its owner (process id
and PID namespace) in `OWNER_FILE`, and creating a new one first removes those of the same
prefix whose owner is gone. Only an owner seen in this process's own PID namespace can be
judged dead (a container sharing /dev/shm with another sees other pids), and a folder without
the record (another program's, or one still being created) is never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from searchrl.utils.output import pid_alive

SHM = Path("/dev/shm")
OWNER_FILE = ".searchrl-owner"


def _pid_namespace() -> str:
    """This process's PID namespace (`pid:[4026531836]`), or "" where /proc cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _owner(directory: Path) -> tuple[int, str] | None:
    """(pid, PID namespace) from a directory's owner record, or None without a readable one."""
    try:
        pid, _, namespace = (directory / OWNER_FILE).read_text().strip().partition(" ")
        return int(pid), namespace
    except (OSError, ValueError):
        return None


def remove_orphans(prefix: str, parent: Path) -> list[Path]:
    """Remove `parent`'s `prefix*` directories whose recorded owner has exited in this PID
    namespace; returns those removed."""
    namespace = _pid_namespace()
    removed = []
    for directory in sorted(parent.glob(f"{prefix}*")):
        owner = _owner(directory)
        if owner is None or owner[1] != namespace or owner[0] == os.getpid():
            continue
        if not pid_alive(owner[0]):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def scratch_dir(prefix: str, parent: Path | None = None) -> Path:
    """A new private directory named `prefix…` in RAM (/dev/shm) where there is one, else in
    the temp dir, after removing the orphans of earlier runs there."""
    if parent is None:
        shm = SHM.is_dir() and os.access(SHM, os.W_OK)
        parent = SHM if shm else Path(tempfile.gettempdir())
    remove_orphans(prefix, parent)
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (directory / OWNER_FILE).write_text(f"{os.getpid()} {_pid_namespace()}\n")
    return directory
