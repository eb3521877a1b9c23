"""One place chooses torch's thread count: explicit settings win, else the free cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from searchrl.utils import threads
from searchrl.utils.threads import (
    apply_threads,
    bound_cores,
    busy_between,
    choose_threads,
    core_list,
    engine_threads,
)


def test_explicit_settings_win_in_order() -> None:
    env = {"SEARCHRL_THREADS": "3", "OMP_NUM_THREADS": "5"}
    assert choose_threads(2, environ=env, cores=8, load=0).threads == 2
    assert choose_threads(0, environ=env, cores=8, load=0).threads == 3
    assert choose_threads(0, environ={"OMP_NUM_THREADS": "5"}, cores=8, load=0).threads == 5


@pytest.mark.parametrize(
    ("cores", "load", "threads"),
    [(2, 0.1, 2), (2, 1.0, 1), (2, 1.6, 1), (2, 7.0, 1), (16, 3.2, 13), (1, 0.0, 1)],
)
def test_free_cores_from_affinity_and_load(cores: int, load: float, threads: int) -> None:
    choice = choose_threads(environ={}, cores=cores, load=load)
    assert choice.threads == threads
    assert choice.describe().startswith(f"{threads} thread")


def test_busy_cores_count_only_this_process_cpus_between_snapshots() -> None:
    before = {0: (100, 1000), 1: (500, 1000), 2: (0, 1000)}
    after = {0: (200, 1100), 1: (550, 1100), 2: (100, 1100)}  # cpu 0 and 2 fully busy, 1 half
    assert busy_between(before, after, {0, 1}) == pytest.approx(1.5)
    assert busy_between(before, after, {2}) == pytest.approx(1.0)
    assert busy_between(before, before, {0, 1, 2}) == 0.0  # no time passed: nothing known


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc/stat")
def test_a_spinning_process_shows_as_one_busy_core_now_not_a_minute_later() -> None:
    """The load average would still count a job that ended; /proc/stat sees only what runs."""
    import subprocess
    import sys
    import time

    cpu = min(os.sched_getaffinity(0))
    spin = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    try:
        time.sleep(0.3)
        before = threads._cpu_times()
        time.sleep(0.5)
        after = threads._cpu_times()
    finally:
        spin.kill()
        spin.wait()
    assert busy_between(before, after, {cpu}) > 0.8


def test_processes_launched_together_share_the_cores() -> None:
    choice = choose_threads(environ={"LOCAL_WORLD_SIZE": "4"}, cores=16, load=9.0)
    assert (choice.threads, choice.reason) == (4, "16 cores / 4 processes")
    assert choose_threads(environ={"LOCAL_WORLD_SIZE": "4"}, cores=2, load=0).threads == 1


def test_garbage_in_the_environment_is_ignored() -> None:
    assert choose_threads(environ={"OMP_NUM_THREADS": "lots"}, cores=2, load=0).threads == 2


def test_apply_exports_for_torch_and_children(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SEARCHRL_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    try:
        choice = apply_threads(1)
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
        assert torch.get_num_threads() == choice.threads == 1
    finally:
        torch.set_num_threads(before)


def test_searchrl_threads_wins_over_an_inherited_omp_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server started with SEARCHRL_THREADS=2 by a process that exported OMP_NUM_THREADS=1
    ran faiss on one thread: the choice was 2, the exported variable stayed 1."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setenv("SEARCHRL_THREADS", "2")
    try:
        assert apply_threads().threads == 2
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "2"
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("bind", "cores", "expected"),
    [("auto", 2, 1), ("auto", 1, 1), ("auto", 16, 15), ("nobind", 2, 2), ("all", 2, 2), ("0", 2, 1),
     ("0-1", 2, 2), ("0,2-3", 8, 3), ("0-3|4-7", 8, 4)],
)  # fmt: skip
def test_cores_of_a_vllm_core_list(bind: str, cores: int, expected: int) -> None:
    assert bound_cores(bind, cores) == expected


def test_all_is_this_process_s_own_cores_and_other_lists_pass_through() -> None:
    mine = sorted(os.sched_getaffinity(0))
    assert core_list("all") == ",".join(map(str, mine))
    assert bound_cores(core_list("all"), len(mine)) == len(mine)
    for bind in ("auto", "nobind", "0-1", "0,2-3"):
        assert core_list(bind) == bind


def test_an_unreadable_core_list_is_refused() -> None:
    with pytest.raises(ValueError, match="core list"):
        bound_cores("zero", 2)


def test_engine_threads_reach_children_and_are_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    child = "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"
    with engine_threads(1):
        seen = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert seen.stdout.split() == ["1", "1"]
    assert os.environ["OMP_NUM_THREADS"] == "2" and "MKL_NUM_THREADS" not in os.environ


def test_commands_report_the_reason_of_their_own_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """`searchrl rollout` printed "1 thread (OMP_NUM_THREADS=1)" on a busy machine: the reason
    was the variable `apply_threads` had just exported, not the busy cores that chose it."""
    import torch

    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "SEARCHRL_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda: 2.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "_applied", [])
    try:
        chosen = apply_threads()
        assert chosen.threads == 1 and "busy" in chosen.reason
        assert threads.current_threads() == chosen
    finally:
        torch.set_num_threads(before)
