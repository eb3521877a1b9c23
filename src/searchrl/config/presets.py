"""Named presets: YAML files shipped inside the package (`searchrl/presets/*.yaml`), so an
installed wheel has them as well as a source checkout. `--config NAME` finds one by name;
`--config PATH` reads any YAML file instead."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from searchrl.config.errors import OverrideError

PACKAGE = "searchrl"
FOLDER = "presets"


def presets_dir() -> Path:
    """The folder of the shipped presets (a plain directory: the package is never zipped)."""
    return Path(str(resources.files(PACKAGE).joinpath(FOLDER)))


def preset_names() -> list[str]:
    """Every shipped preset's name, sorted."""
    return sorted(p.stem for p in presets_dir().glob("*.yaml"))


def is_path(name: str) -> bool:
    """Whether `--config` was given a file path rather than a preset name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or Path(name).is_file()


def resolve_config(name: str) -> Path:
    """The YAML file `--config NAME` means: a path as given, else the shipped preset of that
    name. An unknown name is a usage error that lists the presets."""
    if is_path(name):
        return Path(name)  # a missing file is reported by the reader, naming the path
    preset = presets_dir() / f"{name}.yaml"
    if preset.is_file():
        return preset
    raise OverrideError(
        f"--config: no config file or preset named {name!r} (presets: {', '.join(preset_names())})"
    )
