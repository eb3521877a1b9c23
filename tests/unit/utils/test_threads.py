"""One place chooses torch's thread count: explicit settings win, else the free cores."""

from __future__ import annotations

import os

import pytest

from searchrl.utils.threads import apply_threads, choose_threads


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
