"""Stop a command's helper processes and remove its scratch folders even when the command is
killed in a way it cannot catch (SIGKILL: the kernel's OOM killer, `kill -9`, a scheduler).

`atexit` and a SIGTERM handler cover every exit Python sees; SIGKILL skips both, and a CPU
vLLM engine then outlives its training run: an OOM-killed trainer here left its engine core
and worker holding 4.3 GB for 15 minutes (and its weight copy in /dev/shm), enough to have the
next run killed too. A `Reaper` is a small watcher process holding the read end of a pipe
whose write end only this process holds: when this process ends, however it ends, the kernel
closes the write end, the watcher reads end-of-file and stops the processes and removes the
folders it was told about, unless it was first told to stand down (a clean `close`). The write
end is close-on-exec, so processes started with exec (vLLM spawns its engine) do not hold it;
one forked without exec would, and would keep the watcher waiting while it lives.

A kill can also come while the processes are still starting, before their owner knows them:
`watch_new_descendants` has the watcher poll /proc every `POLL_S` for processes appearing
below the owner until `stop_looking`, so an engine killed half-started goes too (all but what
appeared in the last poll interval before the kill).

Why a pipe and not `prctl(PR_SET_PDEATHSIG)`: that signal fires when the *thread* that started
the child exits, and a backend may be started from any thread (a thread pool's worker ends
while the engine is still in use). The watcher runs in its own session, so ^C in a terminal,
which signals the whole foreground group, does not reach it. A pid is stopped only while its
start time still matches the one recorded, so a pid reused for another process is never
signalled.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

GRACE_S = 5.0
"""How long stopped processes get to exit on SIGTERM before they are sent SIGKILL."""

POLL_S = 0.2
"""How often the watcher looks for new processes below the owner (`watch_new_descendants`)."""


def _stat(entry: Path) -> list[str]:
    """The fields of `/proc/PID/stat` after the command name (field 3 onwards): the name may
    hold spaces and parentheses, so split after its last ")". OSError when it is gone."""
    return entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (`/proc/PID/stat` field 22), or None
    when it has ended: gone, or a zombie nobody reaped (or there is no /proc)."""
    try:
        fields = _stat(Path(f"/proc/{pid}"))
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, ...), read from /proc; empty
    where there is no /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int(_stat(entry)[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Reaper:
    """The watcher of one resource's processes and folders (module docstring)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "searchrl.utils.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def watch_processes(self, pids: Iterable[int]) -> None:
        """Stop these processes if this one dies without `stand_down` (the watcher's own pid
        is skipped: it would stop itself before the rest)."""
        for pid in set(pids) - {self._proc.pid}:
            started = start_time(pid)
            if started is not None:
                self._send(f"pid {pid} {started}")

    def watch_new_descendants(self, owner: int, existing: Iterable[int]) -> None:
        """Until `stop_looking`, also stop every process that appears below `owner` and is not
        in `existing` (the descendants before the ones to watch start; the watcher skips
        itself). Call it before starting them: a kill while they start then stops them too."""
        self._send(" ".join(["tree", str(owner), *map(str, sorted(set(existing)))]))

    def stop_looking(self) -> None:
        """End `watch_new_descendants`: what it found stays watched, later processes are not
        (another resource's reaper, a child that is not this resource's)."""
        self._send("still")

    def watch_folder(self, folder: Path) -> None:
        """Remove this folder if this process dies without `stand_down`."""
        self._send(f"path {folder}")

    def stand_down(self) -> None:
        """The owner cleaned up itself: the watcher exits and touches nothing."""
        self._send("done")
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()

    def _send(self, line: str) -> None:
        if self._proc.stdin is None or self._proc.stdin.closed:
            return
        try:
            self._proc.stdin.write(f"{line}\n".encode())
            self._proc.stdin.flush()
        except BrokenPipeError:  # a watcher that died cannot reap; the owner goes on
            pass


def reap(pids: dict[int, int], folders: list[Path]) -> None:
    """SIGTERM, a grace period, SIGKILL; then the folders."""

    def alive() -> list[int]:
        return [pid for pid, started in pids.items() if start_time(pid) == started]

    _signal(alive(), signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal(alive(), signal.SIGKILL)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended after the check
            os.kill(pid, signum)


def adopt(pids: dict[int, int], owner: int, skip: set[int]) -> None:
    """Record the processes below `owner` that are not in `skip` (with their start times)."""
    for pid in descendants(owner) - skip - pids.keys():
        started = start_time(pid)
        if started is not None:
            pids[pid] = started


def main() -> None:
    """The watcher: read instructions until end-of-file, then reap unless told `done`. While
    told to look (`tree`), it polls for new processes between instructions."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pids: dict[int, int] = {}
    folders: list[Path] = []
    tree: tuple[int, set[int]] | None = None  # the owner, and the pids not to adopt
    stdin, pending = sys.stdin.fileno(), b""
    while True:
        if tree is not None and not select.select([stdin], [], [], POLL_S)[0]:
            adopt(pids, *tree)
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            kind, _, rest = line.decode().partition(" ")
            if kind == "done":
                return
            if kind == "pid":
                pid, started = rest.split()
                pids[int(pid)] = int(started)
            elif kind == "path":
                folders.append(Path(rest))
            elif kind == "tree":
                owner, *existing = map(int, rest.split())
                tree = (owner, {*existing, os.getpid()})
            elif kind == "still":
                tree = None
    reap(pids, folders)


if __name__ == "__main__":
    main()
