"""A trajectory in flight through the rollout protocol (`rollout.loop`): the phase it is in,
what it waits for, and the tokenizer calls that turn its text into ids. Apart from the engine
so that the engine module holds only the protocol; `observation_ids` is shared with the SFT
warm start, which cuts reference observations exactly as the engine does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from searchrl.data.templates import INFORMATION_CLOSE
from searchrl.rollout.chunks import Partial
from searchrl.types import Trajectory


class Phase(enum.Enum):
    """Where a trajectory is in the protocol."""

    GENERATE = "generate"
    SEARCH = "search"
    INSERT = "insert"
    DONE = "done"


@dataclass
class Row:
    """One trajectory in flight and the step it is waiting for."""

    traj: Trajectory
    turn: int
    phase: Phase = Phase.GENERATE
    query: str = ""
    pending_env: str = ""
    overflow: bool = False
    """The pending env text did not fit under the total cap (it was not inserted)."""
    forcing: bool = False
    """`force_answer`: `\n<answer>` was appended; the next generation completes the answer."""
    forced: bool = False
    """The answer was forced once already (a row is never forced twice)."""
    partial: Partial | None = None
    """The turn generated so far when it is decoded in chunks (`rollout.decode_chunk`)."""

    @property
    def length(self) -> int:
        """Prompt plus response tokens so far."""
        return len(self.traj.prompt_ids) + sum(len(s.token_ids) for s in self.traj.segments)


class Tokenizer:
    """The two tokenizer calls the engine makes, with the settings it always uses."""

    def __init__(self, tokenizer: object):
        self._tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]


def observation_ids(tokenizer: object, text: str, max_obs_tokens: int) -> tuple[list[int], bool]:
    """Token ids of an env text as the engine inserts it, and whether it was cut: an
    `<information>` block longer than `max_obs_tokens` keeps its first tokens and its closing
    `</information>\n\n`. Reference transcripts for SFT are cut by the same function, so the
    warm start never reads passages that RL would not show."""
    tok = Tokenizer(tokenizer)
    ids = tok.encode(text)
    if not text.endswith(INFORMATION_CLOSE) or len(ids) <= max_obs_tokens:
        return ids, False
    close = tok.encode(INFORMATION_CLOSE)
    body = tok.encode(text[: -len(INFORMATION_CLOSE)])
    return body[: max(max_obs_tokens - len(close), 0)] + close, True
