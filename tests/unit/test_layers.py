"""The architecture rule: a module imports only from its own layer or lower (DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "searchrl"

LAYERS = {
    "types": 0, "config": 0, "utils": 0,
    "data": 1, "retrieval": 1, "models": 1, "reward": 1,
    "rollout": 2,
    "refiner": 3,
    "algo": 4,
    "train": 5, "eval": 5, "report": 5,
    "cli": 6, "__main__": 6,
}  # fmt: skip


def _room(module_path: Path) -> str:
    rel = module_path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imported_rooms(path: Path) -> set[str]:
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "searchrl" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


def test_every_room_has_a_layer() -> None:
    rooms = {
        _room(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    }
    assert rooms <= set(LAYERS), f"rooms without a layer: {rooms - set(LAYERS)}"


def test_imports_only_go_down() -> None:
    violations = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        room = _room(path)
        for target in _imported_rooms(path):
            if target not in LAYERS:
                continue
            if room == "algo" and target not in {"algo", "types"}:
                violations.append(
                    f"{path.relative_to(PACKAGE)} -> {target} (algo imports only types)"
                )
            elif LAYERS[target] > LAYERS[room]:
                violations.append(f"{path.relative_to(PACKAGE)} -> {target}")
    assert not violations, "upward imports:\n" + "\n".join(violations)
