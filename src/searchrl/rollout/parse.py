"""Action parsing, pure text: exactly the Search-R1 rule (a compatibility contract).

The first `<search>…</search>` or `<answer>…</answer>` pair in a turn's output is the action,
its content stripped; a turn with neither is an invalid action. "First" means the block whose
opening tag comes first, closed by the first closing tag of its kind after it — what Search-R1's
`re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)` returns. That regex rescans the
rest of the text from every unclosed opening tag, so a long run of them took quadratic time
(17 s for 16,000 `<search>`); the single scan here is linear and returns the same action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_TAG = re.compile(r"<(/?)(search|answer)>")

ActionKind = Literal["search", "answer", "invalid"]


@dataclass(frozen=True)
class Action:
    """What one generation turn asked for; `content` is the query or the answer ("" if
    invalid)."""

    kind: ActionKind
    content: str = ""


def parse_action(text: str, search: bool = True) -> Action:
    """The first search/answer block of `text`, else an invalid action. Without a search
    engine (`search=False`, the R1 baseline) only an answer block is an action."""
    opened: dict[str, re.Match[str]] = {}
    blocks: dict[str, tuple[int, str]] = {}
    for tag in _TAG.finditer(text):
        closing, name = tag.group(1) == "/", tag.group(2)
        if not closing:
            opened.setdefault(name, tag)
        elif name in opened and name not in blocks:
            start = opened[name]
            blocks[name] = (start.start(), text[start.end() : tag.start()])
            if len(blocks) == 2:
                break
    if not search:
        blocks.pop("search", None)
    if not blocks:
        return Action("invalid")
    name, (_, content) = min(blocks.items(), key=lambda item: item[1][0])
    kind: ActionKind = "search" if name == "search" else "answer"
    return Action(kind, content.strip())
