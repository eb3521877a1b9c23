"""The multi-turn search rollout (Search-R1 Algorithm 1) as an explicit state machine.

Every trajectory is a row in one of four phases: GENERATE → (SEARCH →) INSERT → GENERATE … →
DONE. Each pass of the loop generates for all GENERATE rows in one backend call, sends the
queries of all SEARCH rows to the retriever in one batched call, then inserts observations.
Every termination rule lives in `_decide`.

Where this departs from the original on purpose:
- generation stops at `</search>`/`</answer>`/EOS (the original had no stop strings);
- env tokens are tokenized once, when inserted, and appended as an `env` segment at that moment
  (the original re-tokenized the whole text to rebuild its mask);
- a truncated `<information>` block keeps its closing tag, and the total length cap never cuts
  the prompt: the trajectory stops growing instead;
- a retriever failure marks only the affected trajectories failed; the batch goes on.
As in the original code, `max_turns` counts generation rounds (searches or not), and one final
round follows in which a search is not executed. With `config.force_answer` that final round
stops at `</think>`; whatever it ends with short of an answer (a closed thought, a search that
will not run, or its token cap in mid-thought, which the engine closes with `</think>`), the
engine appends `\n<answer>` and the policy completes the answer in at most
`config.answer_tokens` tokens (one more generation call, same turn); an answer still open
then is cut there. A row that runs out of room earlier is forced the same way while the forced
answer fits, and every generation leaves that room, so a trajectory ends unanswered only when
the prompt itself leaves none.
With `config.search` off (the R1 baseline) a trajectory is one turn that `</search>` does not
stop, and nothing is ever retrieved.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import (
    ANSWER_CLOSE,
    FORCED_ANSWER,
    INFORMATION_CLOSE,
    INVALID_ACTION_FEEDBACK,
    SEARCH_CLOSE,
    THINK_CLOSE,
    format_information,
)
from searchrl.models.generation import GenerationBackend, SamplingParams
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.reward.metrics import answer_metrics
from searchrl.rollout.chunks import Partial, join_chunk
from searchrl.rollout.parse import Action, parse_action
from searchrl.rollout.sampler import continue_from, fresh_trajectories, row_seed
from searchrl.types import Question, Role, SearchCall, Segment, Trajectory

Observer = Callable[[Trajectory, Segment], None]
"""Called with each segment right after it is appended (live display in `searchrl chat`)."""


class Phase(enum.Enum):
    """Where a trajectory is in the protocol."""

    GENERATE = "generate"
    SEARCH = "search"
    INSERT = "insert"
    DONE = "done"


@dataclass
class _Row:
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


class _Tokenizer:
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
    tok = _Tokenizer(tokenizer)
    ids = tok.encode(text)
    if not text.endswith(INFORMATION_CLOSE) or len(ids) <= max_obs_tokens:
        return ids, False
    close = tok.encode(INFORMATION_CLOSE)
    body = tok.encode(text[: -len(INFORMATION_CLOSE)])
    return body[: max(max_obs_tokens - len(close), 0)] + close, True


class RolloutEngine:
    """Runs rows through the protocol with one backend, one tokenizer and one retriever."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: object,
        retriever: Retriever,
        config: RolloutConfig,
        seed: int,
        observer: Observer | None = None,
    ):
        self.backend = backend
        self.observer = observer
        self.tokenizer = tokenizer
        self.tok = _Tokenizer(tokenizer)
        self.retriever = retriever
        self.config = config
        self.seed = seed
        self._stop = (
            config.stop if config.search else tuple(s for s in config.stop if s != SEARCH_CLOSE)
        )

    def run(self, starts: Sequence[Trajectory]) -> list[Trajectory]:
        """Extend every start trajectory until it is done; returns them in the same order."""
        position = {id(t): i for i, t in enumerate(starts)}
        done = sorted(self.stream(starts, max(len(starts), 1)), key=lambda t: position[id(t)])
        return done

    def stream(self, starts: Iterable[Trajectory], width: int) -> Iterator[Trajectory]:
        """Extend the start trajectories with at most `width` in flight, yielding each one as
        soon as it is done and taking the next start in its place, so a long row shares its
        generation calls with new ones instead of holding a batch that has finished (what
        `searchrl eval` runs; `run` admits every start at once). Rows finished in the same
        pass come out in the order they were admitted."""
        pending = iter(starts)
        rows: list[_Row] = []
        while True:
            for traj in islice(pending, max(width - len(rows), 0)):
                row = _Row(traj=traj, turn=traj.stats.turns)
                row.phase = self._decide(row, None)
                self._insert_pending(row)
                rows.append(row)
            if not rows:
                return
            generating = [r for r in rows if r.phase is Phase.GENERATE]
            if generating:
                self._generate(generating)
                self._search([r for r in rows if r.phase is Phase.SEARCH])
                for row in rows:
                    self._insert_pending(row)
            for row in rows:
                if row.phase is Phase.DONE:
                    self._score(row.traj)
                    yield row.traj
            rows = [r for r in rows if r.phase is not Phase.DONE]

    def _decide(self, row: _Row, action: Action | None) -> Phase:
        """The termination rules, all in one place. `action` is the turn just generated, or
        None when the row has just been created or had env tokens inserted."""
        stats = row.traj.stats
        if stats.failed is not None:
            return self._finish(row, "failed")
        out_of_room = row.overflow or self._room(row) <= 0
        if action is None:
            return self._force(row, "length") if out_of_room else Phase.GENERATE
        if action.kind == "answer":
            return self._finish(row, "answer")
        if not self.config.search:
            return self._finish(row, "no_answer")
        if row.turn > self.config.max_turns:
            return self._force(row, "max_turns")
        if out_of_room:
            return self._force(row, "length")
        if action.kind == "search":
            return Phase.SEARCH
        row.pending_env = INVALID_ACTION_FEEDBACK
        return Phase.INSERT

    @property
    def _forces(self) -> bool:
        return self.config.force_answer and self.config.search

    def _reserve(self, row: _Row) -> int:
        """Tokens a generation leaves free under `force_answer`, so a forced answer still
        fits after it: the longest forced text and the answer's cap."""
        if not self._forces or row.forcing or row.forced:
            return 0
        return len(self.tok.encode(THINK_CLOSE + FORCED_ANSWER)) + self.config.answer_tokens

    def _room(self, row: _Row) -> int:
        """Tokens this row may still generate or be shown before its forced answer."""
        return self.config.max_total_tokens - row.length - self._reserve(row)

    def _force(self, row: _Row, reason: str, text: str = "") -> Phase:
        """`force_answer`: open the answer for the policy (closing an open thought first)
        instead of ending the row for `reason`; a row forced once, or without the room for
        it, ends for `reason`."""
        opened = text.count("<think>") > text.count(THINK_CLOSE)
        forced = (THINK_CLOSE if opened else "") + FORCED_ANSWER
        room = self.config.max_total_tokens - row.length
        if not self._forces or row.forced or len(self.tok.encode(forced)) >= room:
            return self._finish(row, reason, truncated=reason == "length")
        row.pending_env, row.forcing, row.forced, row.overflow = forced, True, True, False
        return Phase.INSERT

    def _finish(self, row: _Row, reason: str, *, truncated: bool = False) -> Phase:
        row.traj.stats.stop_reason = reason
        row.traj.stats.truncated = row.traj.stats.truncated or truncated
        return Phase.DONE

    def _final_round(self, row: _Row) -> bool:
        """The round after `max_turns` rounds: a search in it is not executed."""
        return row.turn >= self.config.max_turns

    def _sampling(self, row: _Row) -> SamplingParams:
        room = self.config.max_total_tokens - row.length
        force = self._forces
        stop, cap = self._stop, min(self.config.max_response_tokens, self._room(row))
        if row.forcing:
            stop, cap = (ANSWER_CLOSE,), min(self.config.answer_tokens, room)
        elif force and self._final_round(row):
            stop = (*self._stop, THINK_CLOSE)
        if row.partial is None:
            row.partial = Partial(cap=max(cap, 1))
        done = len(row.partial.token_ids)
        left = max(row.partial.cap - done, 1)
        key = row.traj.id + ("#answer" if row.forcing else "") + (f"@{done}" if done else "")
        return SamplingParams(
            max_new_tokens=min(left, self.config.decode_chunk or left),
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            seed=row_seed(self.seed, key, row.turn),
            stop=stop,
            continues=row.turn < self.config.max_turns
            or (force and not row.forcing and self._final_round(row))
            or left > (self.config.decode_chunk or left),
        )

    def _generate(self, rows: list[_Row]) -> None:
        """One backend call for every row waiting to generate."""
        prompts = [r.traj.prompt_ids + r.traj.response_ids for r in rows]
        params = [self._sampling(r) for r in rows]
        for prompt, row in zip(prompts, rows, strict=True):
            prompt += row.partial.token_ids if row.partial is not None else []
        started = time.perf_counter()
        outputs = self.backend.generate(prompts, params)
        elapsed = time.perf_counter() - started
        generated = sum(len(out.token_ids) for out in outputs)
        for row, chunk, sampled in zip(rows, outputs, params, strict=True):
            # Each row's share of the batched call, by the tokens it generated: summed over
            # the rows, the shares add up to the call's wall time (tokens/s stays honest).
            row.traj.stats.generation_s += elapsed * len(chunk.token_ids) / max(generated, 1)
            assert row.partial is not None
            chunked = self.config.decode_chunk > 0
            out = join_chunk(row.partial, chunk, sampled.stop, self.tok.decode, chunked)
            if out is None:  # the turn goes on in the next call
                continue
            row.partial = None
            complete = len(out.logprobs) == len(out.token_ids)
            logprobs = list(out.logprobs) if complete else None
            self._append(row.traj, "policy", out.text, out.token_ids, logprobs)
            if row.forcing:
                row.phase = self._complete_forced(row, out.text)
                continue
            closed = self._closed_final_thought(row, out.text, out.stop_string)
            row.turn += 1
            row.traj.stats.turns = row.turn
            action = parse_action(out.text, self.config.search)
            if not closed:  # a final round that only closed its thought took no action
                valid = action.kind != "invalid"
                row.traj.stats.valid_actions += int(valid)
                row.traj.stats.invalid_actions += int(not valid)
            row.query = action.content if action.kind == "search" else ""
            if action.kind == "answer":
                row.traj.answer = action.content
            elif self._forces and row.turn > self.config.max_turns:
                row.phase = self._force(row, "max_turns", out.text)
                continue
            row.phase = self._decide(row, action)

    def _closed_final_thought(self, row: _Row, text: str, stop_string: str | None) -> bool:
        """`force_answer`: the final round closed its reasoning (and nothing else)."""
        return (
            self._forces
            and self._final_round(row)
            and (stop_string == THINK_CLOSE or text.rstrip().endswith(THINK_CLOSE))
            and parse_action(text, self.config.search).kind == "invalid"
        )

    def _complete_forced(self, row: _Row, text: str) -> Phase:
        """The policy's completion of the answer the engine opened. One still open at
        `answer_tokens` is cut there: its first line, up to any tag, is the answer
        (`answer_cap`); only an empty one leaves the row unanswered."""
        row.forcing = False
        action = parse_action(FORCED_ANSWER + text, search=False)
        if action.kind == "answer":
            row.traj.stats.valid_actions += 1
            row.traj.answer = action.content
            return self._finish(row, "answer")
        capped = text.strip().split("\n", 1)[0].split("<", 1)[0].strip()
        if not capped:
            row.traj.stats.invalid_actions += 1
            return self._finish(row, "max_turns")
        row.traj.answer = capped
        return self._finish(row, "answer_cap")

    def _search(self, rows: list[_Row]) -> None:
        """All queries of this turn in ONE retriever call; a failure fails these rows only."""
        if not rows:
            return
        started = time.perf_counter()
        failure: str | None = None
        try:
            results = self.retriever.search([r.query for r in rows], self.config.topk)
        except RetrievalError as err:
            results, failure = [], f"retrieval: {err}"
        elapsed = time.perf_counter() - started
        for i, row in enumerate(rows):
            row.traj.stats.retrieval_s += elapsed
            if failure is not None:
                row.traj.stats.failed = failure
                row.phase = self._decide(row, None)
                continue
            hits = results[i][: self.config.topk]
            row.traj.searches.append(
                SearchCall(query=row.query, doc_ids=[h.document.id for h in hits], turn=row.turn)
            )
            row.traj.stats.searches += 1
            row.pending_env = format_information([h.document.contents for h in hits])
            row.phase = Phase.INSERT

    def _insert_pending(self, row: _Row) -> None:
        """Insert env text until the row waits for something else (an observation that
        leaves no room is followed by the forced answer's opening)."""
        while row.phase is Phase.INSERT:
            self._insert(row)

    def _insert(self, row: _Row) -> None:
        """Append the pending env text as an `env` segment: an observation is cut to its token
        budget keeping `</information>\\n\\n`; any env text that cannot fit under the total cap
        is not inserted at all, and the row ends truncated."""
        room = self.config.max_total_tokens - row.length
        ids, cut = observation_ids(self.tokenizer, row.pending_env, self.config.max_obs_tokens)
        row.traj.stats.info_truncated += int(cut)
        row.pending_env = ""
        row.overflow = len(ids) > room
        if not row.overflow:
            self._append(row.traj, "env", self.tok.decode(ids), ids)
        row.phase = self._decide(row, None)

    def _append(
        self,
        traj: Trajectory,
        role: Role,
        text: str,
        ids: list[int],
        logprobs: list[float] | None = None,
    ) -> None:
        segment = traj.append(role, text, ids, logprobs)
        if self.observer is not None:
            self.observer(traj, segment)

    def _score(self, traj: Trajectory) -> None:
        """The answer is the content of a complete `<answer>` action of one policy turn (set
        when that turn was parsed); text pieced together across turns never counts."""
        traj.metrics = answer_metrics(traj.answer, traj.golden_answers)


def run_rollouts(
    backend: GenerationBackend,
    tokenizer: object,
    retriever: Retriever,
    questions: Sequence[Question],
    config: RolloutConfig,
    *,
    n_samples: int = 1,
    prefixes: Sequence[Trajectory | None] | None = None,
    seed: int = 0,
    observer: Observer | None = None,
) -> list[Trajectory]:
    """Roll out `n_samples` trajectories per question (grouped by question, `id = uid#sample`),
    or, with `prefixes` (one per question, None = fresh, `n_samples` must be 1), continue each
    given partial trajectory keeping its id, so the same seed reproduces the original
    continuation. Returns finished trajectories with `answer` and `metrics` filled;
    `observer` sees every segment as it is appended."""
    if prefixes is None:
        starts = fresh_trajectories(tokenizer, questions, n_samples, config)
    else:
        if len(prefixes) != len(questions) or n_samples != 1:
            raise ValueError("prefixes need one entry per question and n_samples == 1")
        starts = [
            continue_from(p) if p is not None else fresh_trajectories(tokenizer, [q], 1, config)[0]
            for q, p in zip(questions, prefixes, strict=True)
        ]
    return RolloutEngine(backend, tokenizer, retriever, config, seed, observer).run(starts)
