"""bf16 is chosen by measurement: flags only rule it out, a matmul probe decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from searchrl.models import precision


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts with no verdict in memory or on disk, and no override."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SEARCHRL_BF16", raising=False)
    precision.cpu_has_fast_bf16.cache_clear()
    yield
    precision.cpu_has_fast_bf16.cache_clear()


def _probe_returns(monkeypatch: pytest.MonkeyPatch, speedup: float) -> list[int]:
    calls: list[int] = []

    def probe() -> float:
        calls.append(1)
        return speedup

    monkeypatch.setattr(precision, "_probe_bf16_speedup", probe)
    return calls


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


def test_the_verdict_is_kept_per_machine_so_processes_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A killed evaluation and its restart probed on a busy machine and landed on either side
    of the bar (bf16 once, fp32 the next time), so the restart refused its own folder."""
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512_bf16"})
    calls = _probe_returns(monkeypatch, 1.5)
    assert precision.cpu_has_fast_bf16() is True
    precision.cpu_has_fast_bf16.cache_clear()  # as a new process would start
    calls = _probe_returns(monkeypatch, 0.6)  # a probe now would say the opposite
    assert precision.cpu_has_fast_bf16() is True and calls == []
    saved = json.loads(precision._cache_file().read_text())
    assert [entry["speedup"] for entry in saved.values()] == [1.5]


def test_another_torch_or_cpu_probes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512_bf16"})
    _probe_returns(monkeypatch, 1.5)
    assert precision.cpu_has_fast_bf16() is True
    precision.cpu_has_fast_bf16.cache_clear()
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    calls = _probe_returns(monkeypatch, 0.6)
    assert precision.cpu_has_fast_bf16() is False and calls == [1]
    assert len(json.loads(precision._cache_file().read_text())) == 2


def test_an_unreadable_cache_only_costs_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512_bf16"})
    precision._cache_file().parent.mkdir(parents=True)
    precision._cache_file().write_text("{not json")
    calls = _probe_returns(monkeypatch, 4.6)
    assert precision.cpu_has_fast_bf16() is True and calls == [1]
    assert json.loads(precision._cache_file().read_text())  # rewritten whole


@pytest.mark.parametrize(("value", "fast"), [("0", False), ("1", True)])
def test_the_environment_overrides_flags_and_probe(
    monkeypatch: pytest.MonkeyPatch, value: str, fast: bool
) -> None:
    monkeypatch.setenv("SEARCHRL_BF16", value)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(precision, "_probe_bf16_speedup", lambda: pytest.fail("no probe"))
    assert precision.cpu_has_fast_bf16() is fast


def test_the_cpu_summary_names_the_bf16_flags_and_the_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "fma", "avx512f"})
    summary = precision.cpu_summary()
    assert summary["flags"] == ["avx2", "avx512f"]
    assert summary["fast_bf16"] is False  # no native bf16 flag: emulated, never fast
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setenv("SEARCHRL_BF16", "1")
    precision.cpu_has_fast_bf16.cache_clear()
    assert precision.cpu_summary()["fast_bf16"] is True
    assert precision.cpu_summary()["flags"] == ["avx2", "avx512f", "avx512_bf16"]
