"""The configuration reference and the veRL key map are generated from the dataclasses; the
committed pages must be what the code renders now, and every key the map names must exist."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from searchrl.config.describe import allowed, first_sentence, settings
from searchrl.config.reference import REGENERATE, rendered
from searchrl.config.roots import ROOTS
from searchrl.config.train import TrainConfig
from searchrl.config.verl_keys import KEYS

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", sorted(rendered()))
def test_the_committed_reference_is_current(name: str) -> None:
    committed = REPO / "docs" / "reference" / name
    assert committed.is_file(), f"docs/reference/{name} is missing; run `{REGENERATE}`"
    assert committed.read_text() == rendered()[name], (
        f"docs/reference/{name} is out of date with the config dataclasses; run `{REGENERATE}` "
        "(or `make reference`) and commit the result"
    )


def test_every_mapped_key_is_a_train_setting() -> None:
    keys = {s.key for s in settings(TrainConfig())}
    for entry in KEYS:
        assert entry.ours is None or entry.ours in keys, entry
        assert entry.ours is not None or entry.note, f"{entry.theirs}: say why it has no match"
    assert len({e.theirs for e in KEYS}) == len(KEYS)


def test_every_setting_of_every_command_is_in_the_reference() -> None:
    page = rendered()["config.md"]
    for root in ROOTS:
        for cls in (root.cls, *typing.get_type_hints(root.cls).values()):
            if isinstance(cls, type) and dataclasses.is_dataclass(cls):
                assert f"### {cls.__name__}" in page
        for setting in settings(root.cls()):
            assert f"`{setting.key.split('.')[-1]}`" in page, setting.key


def test_allowed_values_and_first_sentences_read_well() -> None:
    hints = typing.get_type_hints(TrainConfig, include_extras=True)
    assert allowed(hints["steps"]) == "integer ≥ 1"
    algo = typing.get_type_hints(type(TrainConfig().algo), include_extras=True)
    assert allowed(algo["advantage"]) == "gae | grpo | rloo | reinforce"
    assert allowed(algo["gamma"]) == "number [0, 1]"
    assert first_sentence("Dr. GRPO's loss (see a. b.). Rest.") == "Dr. GRPO's loss (see a. b.)."
    assert first_sentence("x" * 300).endswith("…") and len(first_sentence("x" * 300)) == 160
