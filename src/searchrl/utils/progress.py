"""Progress bars with a rate and an ETA for long stages (rollouts, statistics, training,
evaluation). A stage reports work through a plain `advance(n)` callback, so the code doing the
work never depends on rich."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

Advance = Callable[[int], None]
"""Report `n` more units of work done."""


def _ignore(_: int) -> None:
    return None


@contextlib.contextmanager
def progress_bar(
    label: str,
    total: int | None,
    *,
    enabled: bool = True,
    console: Console | None = None,
    unit: str = "",
    completed: int = 0,
) -> Iterator[Advance]:
    """A bar `label ━━━━ 12/48 unit 0:00:31 ETA 0:01:40`; yields `advance(n)`. Disabled (tests,
    non-zero ranks) or without a terminal to redraw it in (pipes, logs) it draws nothing.
    `completed` units were done before (a resumed stage): they do not count towards the rate."""
    console = console or Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield _ignore
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(label, total=total, completed=completed)

        def advance(n: int = 1) -> None:
            progress.update(task, advance=n)

        yield advance
