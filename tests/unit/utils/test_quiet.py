"""`searchrl` quiets the libraries before it loads them, unless asked to keep them talking; a
user's own setting always wins."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys

import pytest

from searchrl.utils.quiet import QUIET, VERBOSE_ENV, quiet_libraries


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*QUIET, VERBOSE_ENV):
        monkeypatch.delenv(name, raising=False)
    level = logging.getLogger("vllm").level
    yield
    logging.getLogger("vllm").setLevel(level)


def test_quiet_sets_every_switch_but_keeps_the_user_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    quiet_libraries()
    import os

    assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"  # the user's choice
    assert os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    assert logging.getLogger("vllm").level == logging.DEBUG


def test_verbose_leaves_the_libraries_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERBOSE_ENV, "1")
    quiet_libraries()
    import os

    assert "TORCH_CPP_LOG_LEVEL" not in os.environ


def test_vllm_s_import_warning_is_not_printed() -> None:
    """vLLM warns at import that Triton has no CPU backend, through a logger it has not
    configured; the command's first lines must not carry it."""
    pytest.importorskip("vllm")
    code = ("from searchrl.utils.quiet import quiet_libraries; quiet_libraries(); "
            "import vllm.triton_utils.importing")  # fmt: skip
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    loud = subprocess.run([sys.executable, "-c", code.split("; ", 2)[2]], capture_output=True,
                          text=True)  # fmt: skip
    assert quiet.returncode == 0 and "Triton" not in quiet.stderr
    if importlib.util.find_spec("triton") is not None:  # the warning exists: it is hidden
        assert "Triton" in loud.stderr
