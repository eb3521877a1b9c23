"""Progress bars with a rate and an ETA for long stages (rollouts, statistics, training,
evaluation). A stage reports work through a plain `advance(n)` callback, so the code doing the
work never depends on rich.

Where no terminal can redraw a bar (`make demo > log`, CI, nohup), rich draws nothing until the
stage ends, and a 10-minute SFT looks hung; there `LineProgress` prints the same count, elapsed
time and ETA as one plain line at most every `LINE_EVERY_S` seconds."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

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


LINE_EVERY_S = 30.0
"""Seconds between two plain progress lines (the first and the last are always printed)."""


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class LineProgress:
    """The subset of `rich.progress.Progress` the stages use (`task_ids`, `update`), printed as
    plain lines `label: 12/48 unit · 0:00:31 elapsed · ETA 0:01:40 · description`. The rate
    counts only work done since the start, not `completed` units of a resumed stage."""

    def __init__(
        self,
        label: str,
        total: int | None,
        completed: int = 0,
        unit: str = "",
        stream: TextIO | None = None,
        every_s: float = LINE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.completed = self.start_count = completed
        self.description = ""
        self.stream = stream or sys.stderr
        self.every_s, self.clock = every_s, clock
        self.started = clock()
        self.printed_at: float | None = None
        self.task_ids = [0]

    def update(
        self,
        task_id: int = 0,
        *,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
    ) -> None:
        """As rich's `update`: set or advance the count and/or the description."""
        if completed is not None:
            self.completed = int(completed)
        if advance is not None:
            self.completed += int(advance)
        if description is not None:
            self.description = description
        done = self.total is not None and self.completed >= self.total
        now = self.clock()
        if done or self.printed_at is None or now - self.printed_at >= self.every_s:
            self.printed_at = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        """The current state as one line."""
        elapsed = now - self.started
        count = f"{self.completed}/{self.total}" if self.total is not None else f"{self.completed}"
        parts = [f"{self.label}: {count}{' ' + self.unit if self.unit else ''}"]
        parts.append(f"{_clock(elapsed)} elapsed")
        rate_done = self.completed - self.start_count
        if self.total is not None and rate_done > 0 and elapsed > 0:
            left = (self.total - self.completed) * elapsed / rate_done
            parts.append(f"ETA {_clock(max(left, 0.0))}")
        if self.description:
            parts.append(self.description)
        return " · ".join(parts)


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
    non-zero ranks) it draws nothing; without a terminal to redraw it in (pipes, logs) it
    prints a `LineProgress` line now and then.
    `completed` units were done before (a resumed stage): they do not count towards the rate."""
    console = console or Console(stderr=True)
    if not enabled:
        yield lambda _: None
        return
    if not console.is_terminal:
        lines = LineProgress(label, total, completed, unit, stream=console.file)
        yield lambda n=1: lines.update(advance=n)
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
