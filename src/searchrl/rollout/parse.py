"""Action parsing, pure text: exactly the Search-R1 rule (a compatibility contract).

The first `<search>…</search>` or `<answer>…</answer>` pair in a turn's output is the action,
its content stripped; a turn with neither is an invalid action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)

ActionKind = Literal["search", "answer", "invalid"]


@dataclass(frozen=True)
class Action:
    """What one generation turn asked for; `content` is the query or the answer ("" if
    invalid)."""

    kind: ActionKind
    content: str = ""


def parse_action(text: str) -> Action:
    """The first search/answer block of `text`, else an invalid action."""
    match = _ACTION.search(text)
    if match is None:
        return Action("invalid")
    kind: ActionKind = "search" if match.group(1) == "search" else "answer"
    return Action(kind, match.group(2).strip())
