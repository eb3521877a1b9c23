"""YAML + key=value overrides into frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from searchrl.config.loading import ConfigError, load_config


@dataclass(frozen=True)
class _Optim:
    lr: float = 1.0e-6
    steps: int = 10


def test_exponent_without_a_dot_is_a_number() -> None:
    """YAML 1.1 parses `1e-5` as a string; an override written that way must still work."""
    assert load_config(_Optim, overrides=["lr=1e-5"]).lr == pytest.approx(1e-5)


def test_non_numbers_are_still_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match="lr: expected a number"):
        load_config(_Optim, overrides=["lr=fast"])


def test_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(_Optim, overrides=["lrr=1.0"])
