"""A SIGKILLed command's helper processes and scratch folders are reaped (searchrl.utils.reaper).

Real processes throughout: an owner process starts a helper and a reaper, the test kills the
owner with SIGKILL (what the OOM killer does) and watches the helper go."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchrl.utils.reaper import POLL_S, descendants, reap, start_time

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

OWNER = """
import pathlib, subprocess, sys, time
from searchrl.utils.reaper import Reaper

helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
folder = pathlib.Path(sys.argv[1])
folder.mkdir()
reaper = Reaper()
reaper.watch_processes([helper.pid])
reaper.watch_folder(folder)
if sys.argv[2] == "stand_down":
    reaper.stand_down()
print(helper.pid, flush=True)
time.sleep(120)
"""


def _owner(folder: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(folder), mode], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    return owner, int(owner.stdout.readline())


def _ended_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if start_time(pid) is None:
            return True
        time.sleep(0.1)
    return False


def test_a_sigkilled_owner_leaves_no_helper_and_no_folder(tmp_path: Path) -> None:
    """An OOM-killed training run left its vLLM engine (4.3 GB) running for 15 minutes: SIGKILL
    runs no exit hook. The reaper stops what the owner started and removes its folder."""
    folder = tmp_path / "scratch"
    owner, helper = _owner(folder, "watch")
    assert folder.is_dir() and start_time(helper) is not None
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    assert _ended_within(helper, 20)
    deadline = time.monotonic() + 10
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists()


def test_an_owner_that_cleaned_up_stands_the_reaper_down(tmp_path: Path) -> None:
    """After a clean close the watcher touches nothing, even when the owner then dies."""
    folder = tmp_path / "scratch"
    owner, helper = _owner(folder, "stand_down")
    try:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        assert not _ended_within(helper, 2)
        assert folder.is_dir()
    finally:
        if start_time(helper) is not None:
            os.kill(helper, signal.SIGKILL)


STARTING_OWNER = """
import os, subprocess, sys, time
from searchrl.utils.reaper import Reaper, descendants

reaper = Reaper()
reaper.watch_new_descendants(os.getpid(), descendants(os.getpid()))
if sys.argv[1] == "stop_looking":
    reaper.stop_looking()
    time.sleep(1)  # a poll under way when it was told finishes before the helper exists
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(helper.pid, flush=True)  # and never tells the reaper about it
time.sleep(120)
"""


def _killed_while_starting(mode: str) -> int:
    """An owner started a helper it never named to its reaper; it is SIGKILLed after the
    watcher had a few polls to see the helper. Returns the helper's pid."""
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTING_OWNER, mode], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    helper = int(owner.stdout.readline())
    time.sleep(5 * POLL_S)
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    return helper


def test_a_helper_killed_while_it_starts_is_reaped_too() -> None:
    """The reaper used to learn the engine's pids once it had started: a trainer killed during
    the engine's start left it running. Told to look, the watcher finds new processes itself."""
    helper = _killed_while_starting("look")
    try:
        assert _ended_within(helper, 20)
    finally:
        if start_time(helper) is not None:
            os.kill(helper, signal.SIGKILL)


def test_processes_started_after_stop_looking_are_not_adopted() -> None:
    helper = _killed_while_starting("stop_looking")
    try:
        assert not _ended_within(helper, 2)
    finally:
        if start_time(helper) is not None:
            os.kill(helper, signal.SIGKILL)


def test_descendants_include_grandchildren() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while not descendants(shell.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        below, grandchildren = descendants(os.getpid()), descendants(shell.pid)
        assert shell.pid in below and len(grandchildren) == 1
        assert grandchildren <= below
    finally:
        for pid in descendants(shell.pid):
            os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_a_reused_pid_is_never_signalled() -> None:
    """A pid whose start time is not the recorded one belongs to another process now."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = start_time(other.pid)
        assert started is not None
        reap({other.pid: started + 1}, [])
        assert other.poll() is None
        reap({other.pid: started}, [])
        assert other.wait(timeout=10) == -signal.SIGTERM
    finally:
        other.kill()
        other.wait()
