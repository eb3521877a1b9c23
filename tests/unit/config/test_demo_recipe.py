"""The demo runs the CPU recipe: its RL config differs from `tiny_cpu_grpo` in exactly the
settings `DEMO_DIFFERENCES` names (each with the recipe's value and a reason it prints)."""

from __future__ import annotations

from typing import Any

from searchrl.config.demo import DEMO_DIFFERENCES, RECIPE, DemoConfig
from searchrl.config.loading import load_config, to_dict
from searchrl.config.presets import resolve_config as resolve_preset
from searchrl.config.train import TrainConfig


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_demo_differs_from_the_recipe_only_where_it_says_why() -> None:
    recipe = _flat(to_dict(load_config(TrainConfig, resolve_preset(RECIPE))))
    demo = _flat(to_dict(DemoConfig().rl))
    differing = {k for k in recipe if recipe[k] != demo[k]}
    assert differing == set(DEMO_DIFFERENCES)
    for key, (recipe_value, demo_value, reason) in DEMO_DIFFERENCES.items():
        assert recipe[key] == recipe_value, key
        assert demo[key] == demo_value, key
        assert reason.strip(), key
