"""Field ranges declared in types and checked in one place when a config is loaded."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Annotated

import pytest

from searchrl.config import ConfigError, check_config, from_dict, load_config
from searchrl.config.checks import Fraction, PositiveInt, Range, Satisfies, positive_total
from searchrl.config.data import MixConfig, WorldConfig
from searchrl.config.demo import DemoConfig
from searchrl.config.eval import EvalConfig, ReportConfig, RubricConfig
from searchrl.config.interactive import InteractiveConfig
from searchrl.config.model import ModelConfig
from searchrl.config.retrieval import RetrievalConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig

ROOTS = (
    TrainConfig, SFTConfig, DemoConfig, RetrievalConfig, WorldConfig, EvalConfig,
    InteractiveConfig, RubricConfig, ReportConfig, MixConfig,
)  # fmt: skip


@dataclass(frozen=True)
class _Inner:
    rate: Fraction = 0.5
    beams: Annotated[int, Range(ge=1, le=8)] = 2
    limit: PositiveInt | None = None
    weights: tuple[Annotated[float, Range(ge=0)], ...] = (1.0,)

    def validate(self) -> None:
        positive_total("weights", self.weights)


@dataclass(frozen=True)
class _Outer:
    name: Annotated[str, Satisfies(str.isidentifier, "an identifier")] = "x"
    inner: _Inner = field(default_factory=_Inner)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["inner.rate=1.5"], "inner.rate: must be at most 1, got 1.5"),
        (["inner.rate=-0.1"], "inner.rate: must be at least 0, got -0.1"),
        (["inner.rate=.nan"], "inner.rate: must be a number, got nan"),
        (["inner.beams=9"], "inner.beams: must be at most 8, got 9"),
        (["inner.limit=0"], "inner.limit: must be at least 1, got 0"),
        (["inner.weights=[1, -1]"], "inner.weights: must be at least 0, got -1.0"),
        (
            ["inner.weights=[0, 0]"],
            "inner.weights: at least one weight must be positive, got [0.0, 0.0]",
        ),
        (["name=not one"], "name: must be an identifier, got 'not one'"),
    ],
)
def test_out_of_range_values_are_named_by_their_path(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_Outer, overrides=overrides)
    assert str(err.value) == message


def test_none_and_in_range_values_pass() -> None:
    config = load_config(_Outer, overrides=["inner.limit=null", "inner.rate=1", "inner.beams=8"])
    assert config.inner == _Inner(rate=1.0, beams=8)


def test_from_dict_prefix_reaches_range_messages() -> None:
    with pytest.raises(ConfigError, match=r"^rollout\.topk: must be at least 1, got 0$"):
        from_dict(RolloutConfig, {"topk": 0}, prefix="rollout.")


def test_configs_built_in_code_can_be_checked_too() -> None:
    bad = dataclasses.replace(ModelConfig(), generation_batch_size=0)
    with pytest.raises(ConfigError, match="generation_batch_size: must be at least 1"):
        check_config(bad)


@pytest.mark.parametrize("root", ROOTS, ids=lambda c: c.__name__)
def test_every_default_is_valid(root: type) -> None:
    check_config(root())


def _numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """(dotted name, annotation) of every int/float field with declared bounds."""
    found = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        plain = typing.get_type_hints(cls)[item.name]
        if dataclasses.is_dataclass(plain):
            found += _numeric_fields(plain, f"{prefix}{item.name}.")
        elif typing.get_origin(hint) is Annotated and plain in (int, float):
            found.append((prefix + item.name, hint))
    return found


@pytest.mark.parametrize("root", ROOTS[:-1], ids=lambda c: c.__name__)
def test_every_bounded_number_refuses_a_value_below_its_range(root: type) -> None:
    """Each declared lower bound is enforced through the loader, with the field's path."""
    fields = _numeric_fields(root)
    assert fields, f"{root.__name__} declares no bounds"
    for name, hint in fields:
        bound = next(c for c in typing.get_args(hint)[1:] if isinstance(c, Range))
        low = bound.ge if bound.ge is not None else bound.gt
        if low is None:
            continue
        with pytest.raises(ConfigError, match=rf"^{name}: must be"):
            load_config(root, overrides=[f"{name}={low - 1}"])
