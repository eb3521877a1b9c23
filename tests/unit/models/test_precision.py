"""bf16 is chosen by measurement: flags only rule it out, a matmul probe decides."""

from __future__ import annotations

import pytest
import torch

from searchrl.models import precision


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    precision.cpu_has_fast_bf16.cache_clear()
    yield
    precision.cpu_has_fast_bf16.cache_clear()


def test_flags_without_native_bf16_rule_it_out_without_a_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(precision, "_probe_bf16_speedup", lambda: pytest.fail("no probe"))
    assert precision.fast_bf16(torch.device("cpu")) is False
    assert precision.fast_bf16(torch.device("cuda")) is True


@pytest.mark.parametrize("flags", [{"avx512f", "avx512_bf16"}, {"amx_bf16"}, None])
@pytest.mark.parametrize(("speedup", "fast"), [(0.6, False), (1.1, False), (4.6, True)])
def test_where_flags_allow_bf16_the_probe_decides(
    monkeypatch: pytest.MonkeyPatch, flags: set[str] | None, speedup: float, fast: bool
) -> None:
    """An Intel Xeon with AVX512-BF16 and no AMX ran bf16 at 0.6x fp32: the flag alone chose
    bf16 there and made every matmul slower."""
    monkeypatch.setattr(precision, "_cpu_flags", lambda: flags)
    monkeypatch.setattr(precision, "_probe_bf16_speedup", lambda: speedup)
    assert precision.cpu_has_fast_bf16() is fast


def test_the_probe_measures_a_ratio() -> None:
    assert precision._probe_bf16_speedup(rows=16, repeats=1) > 0
