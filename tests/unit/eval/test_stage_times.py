"""The resumable benchmarks record what each stage cost in wall and CPU time, the CPU time of
the processes the stage starts included (a vLLM engine runs its scheduler and worker as
grandchildren of the benchmark); the learning issue's budget is in CPU minutes per seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "common"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "training"))

from stages import Spent, call, read_times, record, run_stage, stage_lock

SPIN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
PARENT = (
    "import subprocess, sys\n"
    "subprocess.run([sys.executable, '-c', {child!r}], check=True)\n" + SPIN.format(s=0.3)
)


def test_cpu_time_counts_the_stage_and_the_processes_it_waited_for(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", PARENT.format(child=SPIN.format(s=0.6))]
    spent = call(cmd, tmp_path / "stage.log", threads=1)
    assert spent.cpu >= 0.85  # 0.3 s in the stage's process + 0.6 s in its child
    assert spent.wall >= spent.cpu * 0.9


def test_a_failed_stage_stops_the_benchmark(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="stage failed"):
        call([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "stage.log", threads=1)


def test_resumed_stages_add_up_and_old_entries_read_as_wall_time(tmp_path: Path) -> None:
    path = tmp_path / "times.json"
    path.write_text(json.dumps({"sft": 120.0}))
    record(path, "recipe", [Spent(60.0, 100.0), Spent(30.0, 20.0)])
    record(path, "recipe", [Spent(10.0, 5.0)])
    times = read_times(path)
    assert times["sft"] == {"wall": 120.0, "cpu": None}
    assert times["recipe"] == {"wall": 100.0, "cpu": 125.0}


def test_a_failed_stage_still_records_what_it_cost(tmp_path: Path) -> None:
    """A stage killed part-way (out of memory, a crash) and resumed later must add up to its
    whole cost: the failed command's time is recorded before the benchmark stops."""
    path = tmp_path / "times.json"
    ok = [sys.executable, "-c", SPIN.format(s=0.2)]
    dies = [sys.executable, "-c", SPIN.format(s=0.3) + "raise SystemExit(3)\n"]
    with pytest.raises(SystemExit, match="stage failed"):
        run_stage(path, "recipe", [ok, dies], tmp_path / "stage.log", threads=1)
    assert read_times(path)["recipe"]["cpu"] >= 0.45  # both commands, the failed one included
    run_stage(path, "recipe", [ok], tmp_path / "stage.log", threads=1)  # the resumed run
    assert read_times(path)["recipe"]["cpu"] >= 0.65


HOLD = (
    "import fcntl, sys, time\n"
    "handle = open(sys.argv[1], 'a')\n"
    "fcntl.flock(handle, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
)


def _holder(lock: Path) -> subprocess.Popen[str]:
    """Another benchmark process holding `lock` until its stdin closes."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-c", HOLD, str(lock)]
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_stage_another_process_runs_is_not_run_twice(tmp_path: Path) -> None:
    """Two learning benchmarks on one seed (one arm each): an evaluation the other process is
    running is left to it (`wait=False` says so and runs nothing), and once it has finished
    the waiting process finds it done instead of running it again."""
    import argparse

    from learning import Seed

    args = argparse.Namespace(arms=["recipe"], engine="auto", test=4, train=4, entities=10)
    seed = Seed(tmp_path, 0, args)
    holder = _holder(seed.dir / ".locks" / "eval_sft")
    try:
        with stage_lock(seed.dir, "eval_sft", wait=False) as held:
            assert not held
        assert seed.run("eval_sft", threads=1, wait=False) is False
        assert not (seed.dir / "eval_sft.log").exists()  # nothing ran
        (seed.dir / "eval_sft").mkdir()
        (seed.dir / "eval_sft" / "summary.json").write_text("{}")  # the holder finished it
    finally:
        holder.communicate("")
    assert seed.run("eval_sft", threads=1, wait=False) is True
    assert not (seed.dir / "eval_sft.log").exists()  # found done, not run again
    assert "eval_sft" not in read_times(seed.times_path)
