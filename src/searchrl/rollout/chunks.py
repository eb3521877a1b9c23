"""A turn decoded in chunks (`rollout.decode_chunk`): at most N tokens per generation call,
the rest of the turn in the next call.

Why: a generation call lasts as long as its longest row. In an evaluation, one row rambling
for 500 tokens kept a call of 16 rows going for 500 decode steps after the other 15 had
stopped at ~40, decoding it alone (issue 64: half of a 200-question evaluation's generation
time). Cut into chunks, the long turn goes on in the next call beside the rows that joined
meanwhile (`RolloutEngine.stream`).

The joined turn is what one call would have returned: the chunks' ids and log-probs in
order, the text decoded from all of them, and a stop string that straddles two chunks (which
neither call saw whole) ends the turn at the token completing it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from searchrl.models.generation import Generation


@dataclass
class Partial:
    """The part of a turn generated so far."""

    cap: int
    """The turn's token limit."""
    stops: tuple[str, ...]
    """The turn's stop strings (every call of the turn has the same)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)


def first_stop(
    decode: Callable[[list[int]], str], ids: list[int], start: int, stops: Sequence[str]
) -> tuple[int, str] | None:
    """(n, stop) for the fewest tokens `ids[:n]`, n > `start`, whose decoding holds a stop
    string that `ids[:start]` does not; None when there is none."""
    before = decode(ids[:start])
    if not any(s in decode(ids) and s not in before for s in stops):
        return None
    for n in range(start + 1, len(ids) + 1):
        text = decode(ids[:n])
        found = next((s for s in stops if s in text and s not in before), None)
        if found is not None:
            return n, found
    return None


def join_chunk(
    partial: Partial,
    out: Generation,
    decode: Callable[[list[int]], str],
    chunked: bool,
) -> Generation | None:
    """Add one call's output to the turn; the whole turn when it is over (a stop string, EOS,
    or the turn's limit), else None (the row generates again, `partial` holds what it has)."""
    start = len(partial.token_ids)
    partial.token_ids += out.token_ids
    complete = len(out.logprobs) == len(out.token_ids) and partial.logprobs is not None
    partial.logprobs = (partial.logprobs or []) + list(out.logprobs) if complete else None
    if start == 0 and (not chunked or out.stop_reason != "length"):
        return out  # a turn that fits one call stays exactly as the backend returned it
    ids = partial.token_ids
    reason, stop = out.stop_reason, out.stop_string
    if start > 0 and (found := first_stop(decode, ids, start, partial.stops)) is not None:
        cut, stop = found
        ids, reason = ids[:cut], "stop"
    elif reason == "length" and len(ids) < partial.cap:
        return None
    logprobs = partial.logprobs[: len(ids)] if partial.logprobs is not None else []
    return Generation(list(ids), logprobs, decode(list(ids)), reason, stop)
