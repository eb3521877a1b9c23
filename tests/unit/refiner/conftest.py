"""Every test here runs on one torch thread (`tokenizer`, `tiny`: tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Tiny matmuls on 2 busy cores are far slower with two OpenMP threads."""
