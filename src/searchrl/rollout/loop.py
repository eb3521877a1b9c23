"""The multi-turn search rollout (Search-R1 Algorithm 1) as an explicit state machine.

Every trajectory is a row in one of four phases: GENERATE → (SEARCH →) INSERT → GENERATE … →
DONE. Each pass of the loop generates for all GENERATE rows in one backend call, sends the
queries of all SEARCH rows to the retriever in one batched call, then inserts observations;
with `rollout.streaming` and an engine that streams, a row goes on as soon as its own turn is
done (`_run_streaming`). Both hand a finished generation to `_receive`; every termination rule
lives in `_decide`.

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

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import (
    ANSWER_CLOSE,
    FORCED_ANSWER,
    INVALID_ACTION_FEEDBACK,
    SEARCH_CLOSE,
    THINK_CLOSE,
    format_information,
)
from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.reward.metrics import answer_metrics
from searchrl.rollout.chunks import Partial, join_chunk
from searchrl.rollout.parse import Action, parse_action
from searchrl.rollout.rows import Phase, Row, Tokenizer, observation_ids
from searchrl.rollout.sampler import continue_from, fresh_trajectories, row_seed
from searchrl.types import Question, Role, SearchCall, Segment, Trajectory

Observer = Callable[[Trajectory, Segment], None]
"""Called with each segment right after it is appended (live display in `searchrl chat`)."""


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
        self.tok = Tokenizer(tokenizer)
        self.retriever = retriever
        self.config = config
        self.seed = seed
        self._stop = (
            config.stop if config.search else tuple(s for s in config.stop if s != SEARCH_CLOSE)
        )

    def run(self, starts: Sequence[Trajectory]) -> list[Trajectory]:
        """Extend every start trajectory until it is done; returns them in the same order.
        With `rollout.streaming` and an engine that streams, every row is in flight at once
        (`_run_streaming`); otherwise turn by turn, every start admitted at once (`stream`)."""
        if not (self.config.streaming and getattr(self.backend, "streams", False)):
            position = {id(t): i for i, t in enumerate(starts)}
            return sorted(self.stream(starts, max(len(starts), 1)), key=lambda t: position[id(t)])
        rows = [self._admit(t) for t in starts]
        self._run_streaming(rows)
        for row in rows:
            self._score(row.traj)
        return [r.traj for r in rows]

    def stream(self, starts: Iterable[Trajectory], width: int) -> Iterator[Trajectory]:
        """Extend the start trajectories with at most `width` in flight, yielding each one as
        soon as it is done and taking the next start in its place, so a long row shares its
        generation calls with new ones instead of holding a batch that has finished (what
        `searchrl eval` runs; `run` admits every start at once). Rows finished in the same
        pass come out in the order they were admitted."""
        pending = iter(starts)
        rows: list[Row] = []
        while True:
            rows += [self._admit(t) for t in islice(pending, max(width - len(rows), 0))]
            if not rows:
                return
            generating = [r for r in rows if r.phase is Phase.GENERATE]
            if generating:
                self._generate(generating)
                self._advance(rows)
            for row in rows:
                if row.phase is Phase.DONE:
                    self._score(row.traj)
                    yield row.traj
            rows = [r for r in rows if r.phase is not Phase.DONE]

    def _admit(self, traj: Trajectory) -> Row:
        """A row for a start trajectory, past any env text its start calls for (a start
        without room left opens its forced answer at once)."""
        row = Row(traj=traj, turn=traj.stats.turns)
        row.phase = self._decide(row, None)
        self._insert_pending(row)
        return row

    def _decide(self, row: Row, action: Action | None) -> Phase:
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

    def _reserve(self, row: Row) -> int:
        """Tokens a generation leaves free under `force_answer`, so a forced answer still
        fits after it: the longest forced text and the answer's cap."""
        if not self._forces or row.forcing or row.forced:
            return 0
        return len(self.tok.encode(THINK_CLOSE + FORCED_ANSWER)) + self.config.answer_tokens

    def _room(self, row: Row) -> int:
        """Tokens this row may still generate or be shown before its forced answer."""
        return self.config.max_total_tokens - row.length - self._reserve(row)

    def _force(self, row: Row, reason: str, text: str = "") -> Phase:
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

    def _finish(self, row: Row, reason: str, *, truncated: bool = False) -> Phase:
        row.traj.stats.stop_reason = reason
        row.traj.stats.truncated = row.traj.stats.truncated or truncated
        return Phase.DONE

    def _final_round(self, row: Row) -> bool:
        """The round after `max_turns` rounds: a search in it is not executed."""
        return row.turn >= self.config.max_turns

    def _sampling(self, row: Row) -> SamplingParams:
        room = self.config.max_total_tokens - row.length
        force = self._forces
        stop, cap = self._stop, min(self.config.max_response_tokens, self._room(row))
        if row.forcing:
            stop, cap = (ANSWER_CLOSE,), min(self.config.answer_tokens, room)
        elif force and self._final_round(row):
            stop = (*self._stop, THINK_CLOSE)
        if row.partial is None:
            row.partial = Partial(cap=max(cap, 1), stops=stop)
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

    def _advance(self, rows: Sequence[Row]) -> None:
        """After their generation: the searches of `rows` in one retriever call, then the
        observations (and any feedback or forced answer's opening) inserted."""
        self._search([r for r in rows if r.phase is Phase.SEARCH])
        for row in rows:
            self._insert_pending(row)

    def _request(self, row: Row) -> tuple[list[int], SamplingParams]:
        """The prompt and sampling of a row's next generation; a turn decoded in chunks goes
        on from the tokens it has so far, in either path (`_generate`, `_run_streaming`)."""
        params = self._sampling(row)
        assert row.partial is not None
        return row.traj.prompt_ids + row.traj.response_ids + row.partial.token_ids, params

    def _generate(self, rows: list[Row]) -> None:
        """One backend call for every row waiting to generate."""
        requests = [self._request(r) for r in rows]
        started = time.perf_counter()
        outputs = self.backend.generate([p for p, _ in requests], [s for _, s in requests])
        self._receive(list(zip(rows, outputs, strict=True)), time.perf_counter() - started)

    def _run_streaming(self, rows: list[Row]) -> None:
        """Continuous batching across turns (`rollout.streaming`, engines that `stream`:
        `submit`/`collect`): a row's next turn is submitted as soon as its last one is done
        and its search answered, so no row waits for the slowest row of its batch and the
        engine keeps as many rows in flight as there are unfinished trajectories. The rows
        that finish in the same engine step send their queries in one retriever call."""
        stream: Any = self.backend
        flight: dict[str, Row] = {}

        def submit(ready: list[Row]) -> None:
            if ready:
                requests = [self._request(r) for r in ready]
                keys = stream.submit([p for p, _ in requests], [s for _, s in requests])
                flight.update(zip(keys, ready, strict=True))

        submit([r for r in rows if r.phase is Phase.GENERATE])
        while flight:
            started = time.perf_counter()
            finished = stream.collect()
            done = [(flight.pop(key), out) for key, out in finished]
            self._receive(done, time.perf_counter() - started)
            self._advance([row for row, _ in done])
            submit([row for row, _ in done if row.phase is Phase.GENERATE])

    def _receive(self, outputs: list[tuple[Row, Generation]], elapsed: float) -> None:
        """Add each row's generation to its turn; for a turn that is over, append it and
        decide what comes next (a turn decoded in chunks that is not over generates again).
        Each row gets its share of the `elapsed` seconds by the tokens it generated: summed
        over the rows, the shares add up to the call's wall time (tokens/s stays honest)."""
        generated = sum(len(out.token_ids) for _, out in outputs)
        for row, chunk in outputs:
            row.traj.stats.generation_s += elapsed * len(chunk.token_ids) / max(generated, 1)
            assert row.partial is not None
            out = join_chunk(row.partial, chunk, self.tok.decode, self.config.decode_chunk > 0)
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

    def _closed_final_thought(self, row: Row, text: str, stop_string: str | None) -> bool:
        """`force_answer`: the final round closed its reasoning (and nothing else)."""
        return (
            self._forces
            and self._final_round(row)
            and (stop_string == THINK_CLOSE or text.rstrip().endswith(THINK_CLOSE))
            and parse_action(text, self.config.search).kind == "invalid"
        )

    def _complete_forced(self, row: Row, text: str) -> Phase:
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

    def _search(self, rows: list[Row]) -> None:
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

    def _insert_pending(self, row: Row) -> None:
        """Insert env text until the row waits for something else (an observation that
        leaves no room is followed by the forced answer's opening)."""
        while row.phase is Phase.INSERT:
            self._insert(row)

    def _insert(self, row: Row) -> None:
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
