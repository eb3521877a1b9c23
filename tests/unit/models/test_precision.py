"""bf16 is chosen from the hardware: CPU flags where readable, a matmul probe otherwise."""

from __future__ import annotations

import pytest
import torch

from searchrl.models import precision


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    precision.cpu_has_fast_bf16.cache_clear()
    yield
    precision.cpu_has_fast_bf16.cache_clear()


@pytest.mark.parametrize(
    ("flags", "fast"),
    [({"avx2", "fma"}, False), ({"avx512f", "avx512_bf16"}, True), ({"amx_bf16"}, True)],
)
def test_cpu_flags_decide(monkeypatch: pytest.MonkeyPatch, flags: set[str], fast: bool) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: flags)
    monkeypatch.setattr(precision, "_probe_bf16_speedup", lambda: pytest.fail("no probe"))
    assert precision.fast_bf16(torch.device("cpu")) is fast
    assert precision.fast_bf16(torch.device("cuda")) is True


def test_probe_decides_without_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: None)
    monkeypatch.setattr(precision, "_probe_bf16_speedup", lambda: 0.02)
    assert precision.cpu_has_fast_bf16() is False
    monkeypatch.undo()  # the real probe runs and measures a ratio
    assert precision._probe_bf16_speedup(size=64, repeats=1) > 0
