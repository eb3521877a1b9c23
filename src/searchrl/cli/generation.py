"""A live bar of the tokens `chat` is generating: a 135M model on a busy CPU can take minutes
for one turn, and a silent terminal looks hung."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class _TurnBar:
    """Counts forward passes (one per generated token) into a bar that appears with the
    first token of a turn and disappears when the turn's text is printed."""

    def __init__(self, budget: int, console: Console) -> None:
        self.budget = budget
        self.console = console
        self.progress: Progress | None = None

    def tick(self, *_: Any) -> None:
        if self.progress is None:
            self.progress = Progress(
                TextColumn("[dim]generating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tokens"),
                TimeElapsedColumn(),
                TextColumn("ETA ≤"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.progress.add_task("", total=self.budget)
            self.progress.start()
        self.progress.advance(self.progress.task_ids[0])

    def end_turn(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


@contextlib.contextmanager
def token_progress(model: Any, budget: int, console: Console) -> Iterator[Callable[[], None]]:
    """While active, each forward pass of `model` advances a per-turn bar whose total is the
    turn's token budget (so its ETA is an upper bound). Yields `end_turn()`, to call before
    printing a turn's text. Without a torch module (vLLM) it draws nothing."""
    bar = _TurnBar(budget, console)
    hook = getattr(model, "register_forward_hook", None)
    handle = hook(bar.tick) if callable(hook) else None
    try:
        yield bar.end_turn
    finally:
        bar.end_turn()
        if handle is not None:
            handle.remove()
