"""What ships: a wheel built from the repository holds the presets and finds them by name
once unpacked far from the source tree; the license and the citation file are there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def test_a_wheel_ships_the_presets_and_finds_them(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="builds without isolation need setuptools")
    tree = tmp_path / "tree"  # a copy, so the build leaves nothing in the checkout
    (tree / "src").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, tree / name)
    shutil.copytree(REPO / "src" / "searchrl", tree / "src" / "searchrl",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".",
         "-w", str(tmp_path / "dist")],
        cwd=tree, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("searchrl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("searchrl/presets/")}
    assert shipped == {p.name for p in (REPO / "src" / "searchrl" / "presets").glob("*.yaml")}
    assert "tiny_cpu_grpo.yaml" in shipped
    assert any(n.endswith("licenses/LICENSE") for n in names)

    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = (
        "import searchrl; from searchrl.config.presets import resolve_config;"
        "print(searchrl.__file__); print(resolve_config('tiny_cpu_grpo'))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"}, timeout=120, check=False,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    module, preset = found.stdout.split()
    assert Path(module).is_relative_to(unpacked) and Path(preset).is_relative_to(unpacked)


def test_license_and_citation() -> None:
    license_text = (REPO / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text()
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    cited = {ref["title"].split(":")[0]: ref["identifiers"][0]["value"]
             for ref in citation["references"]}  # fmt: skip
    assert cited == {"Search-R1": "arXiv:2503.09516", "Search-R2": "arXiv:2602.03647"}
