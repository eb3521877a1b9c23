"""Every relative link in the Markdown a user reads (README.md, docs/**, benchmarks/README.md)
names a file that exists: pages move between the user guide and the research notes, and a
moved page must not leave dead links behind. Anchors are not checked (GitHub's heading slugs
change with every heading edit); the file part is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
"""`[text](target)` or `[text](target "title")`; images (`![alt](src)`) match too."""
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = ("http://", "https://", "mailto:", "#")


def pages() -> list[Path]:
    found = [REPO / "README.md", REPO / "benchmarks" / "README.md"]
    found += sorted((REPO / "docs").rglob("*.md"))
    return [p for p in found if p.is_file()]


def broken_links(page: Path) -> list[str]:
    """`line: target` for each relative link of `page` (outside code) whose file is missing."""
    broken, in_code = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_code = not in_code
        if in_code:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if target.startswith(EXTERNAL):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{number}: {target}")
    return broken


def _id(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize(
    "page",
    pages(),
    ids=_id,
)
def test_relative_links_name_existing_files(page: Path) -> None:
    assert broken_links(page) == [], f"{_id(page)}: broken relative links"


def test_the_checker_finds_a_dead_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("x\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a) [gone](missing.md) [web](https://x.org/y) [top](#h)\n"
        "`[code](nope.md)`\n```\n[fenced](nope2.md)\n```\n![img](img/none.png)\n"
    )
    assert broken_links(page) == ["1: missing.md", "6: img/none.png"]


if __name__ == "__main__":  # `python tests/unit/test_docs_links.py`: list every broken link
    dead = [f"{_id(p)}:{b}" for p in pages() for b in broken_links(p)]
    print("\n".join(dead) or "every relative link names an existing file")
    raise SystemExit(1 if dead else 0)
