"""The configuration reference and the veRL / Search-R1 key map, rendered from the dataclasses
(`describe`) and the key table (`verl_keys`) so they cannot drift from the code:

    python -m searchrl.config.reference docs/reference      # or: make reference

writes `config.md` and `verl_keys.md`; `tests/unit/config/test_reference.py` fails when the
committed files differ from what this renders.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

from searchrl.config.describe import (
    allowed,
    class_summary,
    field_docs,
    first_sentence,
    format_value,
    section_classes,
    settings,
)
from searchrl.config.loading import read_yaml
from searchrl.config.presets import preset_names, presets_dir
from searchrl.config.roots import ROOTS, detect
from searchrl.config.train import TrainConfig
from searchrl.config.verl_keys import KEYS

REGENERATE = "python -m searchrl.config.reference docs/reference"
HEADER = (
    "<!-- Generated from the config dataclasses by `{command}`; edit the docstrings in "
    "src/searchrl/config/, not this file. -->\n"
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _anchor(cls: type) -> str:
    return cls.__name__.lower()


def _presets_by_root() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name in preset_names():
        root = detect(read_yaml(presets_dir() / f"{name}.yaml"))
        found.setdefault(root.name, []).append(f"`{name}`")
    return found


def _commands_table() -> list[str]:
    presets = _presets_by_root()
    lines = ["| command | settings | shipped presets (`--config NAME`) |", "|---|---|---|"]
    for root in ROOTS:
        commands = ", ".join(f"`searchrl {c}`" for c in root.commands)
        link = f"[{root.cls.__name__}](#{_anchor(root.cls)})"
        lines.append(f"| {commands} | {link} | {', '.join(presets.get(root.name, [])) or '—'} |")
    return lines


def _section_defaults(parent: type, name: str, nested: type) -> str:
    """Where a parent gives a section other defaults than the section's class (evaluation's
    greedy rollout, the demo's RL run), the keys that differ."""
    field = next(f for f in dataclasses.fields(parent) if f.name == name)
    if field.default_factory is dataclasses.MISSING:  # type: ignore[misc]
        return ""
    own = field.default_factory()  # type: ignore[misc]
    changed = [s for s in settings(own, nested()) if s.changed]
    if not changed:
        return ""
    shown = ", ".join(f"`{s.key}={format_value(s.value)}`" for s in changed[:12])
    owner = next((r.name for r in ROOTS if r.cls is parent), parent.__name__)
    more = (
        f" and {len(changed) - 12} more (`searchrl config show {owner}`)"
        if len(changed) > 12
        else ""
    )
    return f" Defaults here: {shown}{more}."


def _class_section(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    plain = typing.get_type_hints(cls)
    docs = field_docs(cls)
    default = cls()
    lines = [f"### {cls.__name__}", "", class_summary(cls), ""]
    lines += ["| key | default | allowed | description |", "|---|---|---|---|"]
    for item in dataclasses.fields(cls):
        nested = plain[item.name]
        doc = docs.get(item.name, "")
        if dataclasses.is_dataclass(nested) and isinstance(nested, type):
            link = f"[{nested.__name__}](#{_anchor(nested)})"
            doc = (doc or class_summary(nested)) + _section_defaults(cls, item.name, nested)
            lines.append(f"| `{item.name}.` | section | {link} | {_cell(doc)} |")
            continue
        value = format_value(getattr(default, item.name))
        lines.append(
            f"| `{item.name}` | `{_cell(value)}` | {_cell(allowed(hints[item.name]))} | "
            f"{_cell(doc)} |"
        )
    return [*lines, ""]


def config_reference() -> str:
    """`config.md`: every command's settings, one table per config class."""
    lines = [
        HEADER.format(command=REGENERATE),
        "# Configuration reference",
        "",
        "Every command builds its settings in this order, later ones winning: the class "
        "defaults below, `--config NAME` (a shipped preset) or `--config FILE.yaml`, the "
        "command's options (`--seed`, `--model`, …), then `key=value` arguments (`--set "
        "key=value` is the same). A nested key is written with dots: `rollout.max_turns=5`. "
        "`searchrl config show NAME` prints every resolved setting of a preset, a run folder "
        "or a command, with its one-line description.",
        "",
        "Coming from Search-R1 or veRL: [their keys and ours](verl_keys.md).",
        "",
        "## Commands",
        "",
        *_commands_table(),
        "",
        "## Settings",
        "",
    ]
    classes: list[type] = []
    for root in ROOTS:
        classes += [c for c in section_classes(root.cls) if c not in classes]
    for cls in classes:
        lines += _class_section(cls)
    return "\n".join(lines).rstrip() + "\n"


def verl_reference() -> str:
    """`verl_keys.md`: Search-R1's training-script keys and the settings they map to."""
    rows = {s.key: s for s in settings(TrainConfig())}
    lines = [
        HEADER.format(command=REGENERATE),
        "# From Search-R1 / veRL keys to searchrl",
        "",
        "Search-R1's `train_ppo.sh` and `train_grpo.sh` configure veRL with Hydra keys; "
        "`searchrl train` takes the settings on the right (`key=value` or in a YAML file). "
        "Batch sizes count prompts in both. An override written with a veRL key is refused "
        "with the name to use instead. The paper's runs are the presets `search_r1_ppo` and "
        "`search_r1_grpo` (`searchrl config show search_r1_ppo`).",
        "",
        "| veRL / Search-R1 | searchrl | default here | note |",
        "|---|---|---|---|",
    ]
    for entry in KEYS:
        if entry.ours is None:
            lines.append(f"| `{entry.theirs}` | — | | {_cell(entry.note)} |")
            continue
        setting = rows[entry.ours]
        note = entry.note or first_sentence(setting.doc)
        lines.append(
            f"| `{entry.theirs}` | `{entry.ours}` | `{_cell(format_value(setting.default))}` "
            f"| {_cell(note)} |"
        )
    return "\n".join(lines) + "\n"


def rendered() -> dict[str, str]:
    """File name → content of every generated reference page."""
    return {"config.md": config_reference(), "verl_keys.md": verl_reference()}


def main(argv: list[str]) -> None:
    """Write the reference pages into the folder given (default docs/reference)."""
    folder = Path(argv[0] if argv else "docs/reference")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (folder / name).write_text(text, encoding="utf-8")
        print(f"wrote {folder / name}")


if __name__ == "__main__":
    main(sys.argv[1:])
