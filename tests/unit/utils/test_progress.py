"""Long stages report progress in logs too, not only on a terminal (`make demo > log` showed
nothing for the whole SFT stage)."""

from __future__ import annotations

import io

from rich.console import Console

from searchrl.utils.progress import LineProgress, progress_bar


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_are_throttled_and_carry_count_eta_and_description() -> None:
    out, clock = io.StringIO(), Clock()
    bar = LineProgress("SFT", 10, stream=out, every_s=30.0, clock=clock)
    clock.now = 10.0
    bar.update(completed=1, description="loss=0.500")  # first update: printed
    clock.now = 20.0
    bar.update(advance=1)  # 10 s later: throttled
    clock.now = 50.0
    bar.update(advance=2)  # 40 s after the first line: printed
    lines = out.getvalue().splitlines()
    assert lines == [
        "SFT: 1/10 · 0:00:10 elapsed · ETA 0:01:30 · loss=0.500",
        "SFT: 4/10 · 0:00:50 elapsed · ETA 0:01:15 · loss=0.500",
    ]
    clock.now = 51.0
    bar.update(completed=10)  # the end is always printed
    assert out.getvalue().splitlines()[-1].startswith("SFT: 10/10 · 0:00:51 elapsed · ETA 0:00:00")


def test_a_resumed_stage_rates_only_the_new_work() -> None:
    out, clock = io.StringIO(), Clock()
    bar = LineProgress("RL", 20, completed=10, unit="steps", stream=out, clock=clock)
    clock.now = 100.0
    bar.update(completed=11)
    assert out.getvalue().strip() == "RL: 11/20 steps · 0:01:40 elapsed · ETA 0:15:00"


def test_progress_bar_prints_lines_without_a_terminal_and_nothing_when_disabled() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    with progress_bar("rollouts", 3, console=console, unit="turns") as advance:
        advance(3)
    assert out.getvalue().startswith("rollouts: 3/3 turns · ")
    quiet = io.StringIO()
    with progress_bar("rollouts", 3, enabled=False, console=Console(file=quiet)) as advance:
        advance(3)
    assert quiet.getvalue() == ""
