"""A CPU vLLM engine in its own processes starts them with one OpenMP thread per core they are
bound to, not the command's own count (runs without vLLM: the engine is a stand-in that starts
a process the way vLLM starts its engine core and worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from searchrl.config.model import ModelConfig
from searchrl.models import vllm_engine

CHILD = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"


class StartsAProcess:
    """Stands in for `vllm.LLM`: starts a child process and keeps what its environment said."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
        self.child_threads = run.stdout.split()


MINE = str(len(os.sched_getaffinity(0)))


def _start(monkeypatch: pytest.MonkeyPatch, config: ModelConfig, cpu: bool) -> Any:
    monkeypatch.setattr(vllm_engine, "import_vllm", lambda: SimpleNamespace(LLM=StartsAProcess))
    monkeypatch.setattr(vllm_engine, "usable_cores", lambda: 2)
    llm, reaper = vllm_engine.start_apart({}, config, cpu)
    reaper.stand_down()
    return llm


@pytest.mark.parametrize(
    ("bind", "expected"), [("auto", "1"), ("0", "1"), ("0-1", "2"), ("all", MINE)]
)
def test_engine_processes_run_one_thread_per_bound_core(
    monkeypatch: pytest.MonkeyPatch, bind: str, expected: str
) -> None:
    """On the idle 2-core Xeon the engine's processes inherited the command's
    OMP_NUM_THREADS=2 and took 409 s for 16 rollouts instead of 57 s with 1."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    llm = _start(monkeypatch, ModelConfig(vllm_threads_bind=bind), cpu=True)
    assert llm.child_threads == [expected, expected]
    assert os.environ["OMP_NUM_THREADS"] == "2"  # the command keeps its own count
    assert "MKL_NUM_THREADS" not in os.environ


def test_a_gpu_engine_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    assert _start(monkeypatch, ModelConfig(), cpu=False).child_threads == ["4", "4"]
