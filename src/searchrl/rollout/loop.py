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
stops at `</think>`, the engine appends `\n<answer>` and the policy completes the answer (one
more generation call, same turn), so a trajectory ends unanswered only at the length cap.
With `config.search` off (the R1 baseline) a trajectory is one turn that `</search>` does not
stop, and nothing is ever retrieved.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.reward.metrics import answer_metrics
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
        rows = [_Row(traj=t, turn=t.stats.turns) for t in starts]
        for row in rows:
            row.phase = self._decide(row, None)
        if self.config.streaming and getattr(self.backend, "streams", False):
            self._run_streaming(rows)
        while True:
            generating = [r for r in rows if r.phase is Phase.GENERATE]
            if not generating:
                break
            self._generate(generating)
            self._advance(rows)
        for row in rows:
            self._score(row.traj)
        return [r.traj for r in rows]

    def _decide(self, row: _Row, action: Action | None) -> Phase:
        """The termination rules, all in one place. `action` is the turn just generated, or
        None when the row has just been created or had env tokens inserted."""
        stats = row.traj.stats
        if stats.failed is not None:
            return self._finish(row, "failed")
        out_of_room = row.overflow or row.length >= self.config.max_total_tokens
        if action is None:
            return self._finish(row, "length", truncated=True) if out_of_room else Phase.GENERATE
        if action.kind == "answer":
            return self._finish(row, "answer")
        if not self.config.search:
            return self._finish(row, "no_answer")
        if row.turn > self.config.max_turns:
            return self._finish(row, "max_turns")
        if out_of_room:
            return self._finish(row, "length", truncated=True)
        if action.kind == "search":
            return Phase.SEARCH
        row.pending_env = INVALID_ACTION_FEEDBACK
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
        force = self.config.force_answer and self.config.search
        stop = self._stop
        if row.forcing:
            stop = (ANSWER_CLOSE,)
        elif force and self._final_round(row):
            stop = (*self._stop, THINK_CLOSE)
        return SamplingParams(
            max_new_tokens=min(self.config.max_response_tokens, room),
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            seed=row_seed(self.seed, row.traj.id + ("#answer" if row.forcing else ""), row.turn),
            stop=stop,
            continues=row.turn < self.config.max_turns
            or (force and not row.forcing and self._final_round(row)),
        )

    def _advance(self, rows: Sequence[_Row]) -> None:
        """After their generation: the searches of `rows` in one retriever call, then the
        observations (and any feedback) inserted."""
        self._search([r for r in rows if r.phase is Phase.SEARCH])
        for row in rows:
            if row.phase is Phase.INSERT:
                self._insert(row)

    def _generate(self, rows: list[_Row]) -> None:
        """One backend call for every row waiting to generate."""
        prompts = [r.traj.prompt_ids + r.traj.response_ids for r in rows]
        started = time.perf_counter()
        outputs = self.backend.generate(prompts, [self._sampling(r) for r in rows])
        self._receive(list(zip(rows, outputs, strict=True)), time.perf_counter() - started)

    def _run_streaming(self, rows: list[_Row]) -> None:
        """Continuous batching across turns (`rollout.streaming`, engines that `stream`:
        `submit`/`collect`): a row's next turn is submitted as soon as its last one is done
        and its search answered, so no row waits for the slowest row of its batch and the
        engine keeps as many rows in flight as there are unfinished trajectories. The rows
        that finish in the same engine step send their queries in one retriever call."""
        stream: Any = self.backend
        flight: dict[str, _Row] = {}

        def submit(ready: list[_Row]) -> None:
            if ready:
                prompts = [r.traj.prompt_ids + r.traj.response_ids for r in ready]
                keys = stream.submit(prompts, [self._sampling(r) for r in ready])
                flight.update(zip(keys, ready, strict=True))

        submit([r for r in rows if r.phase is Phase.GENERATE])
        while flight:
            started = time.perf_counter()
            finished = stream.collect()
            done = [(flight.pop(key), out) for key, out in finished]
            self._receive(done, time.perf_counter() - started)
            self._advance([row for row, _ in done])
            submit([row for row, _ in done if row.phase is Phase.GENERATE])

    def _receive(self, outputs: list[tuple[_Row, Generation]], elapsed: float) -> None:
        """Append each row's generated turn and decide what comes next. Each row gets its
        share of the `elapsed` seconds by the tokens it generated: summed over the rows, the
        shares add up to the call's wall time (tokens/s stays honest)."""
        generated = sum(len(out.token_ids) for _, out in outputs)
        for row, out in outputs:
            complete = len(out.logprobs) == len(out.token_ids)
            logprobs = list(out.logprobs) if complete else None
            self._append(row.traj, "policy", out.text, out.token_ids, logprobs)
            row.traj.stats.generation_s += elapsed * len(out.token_ids) / max(generated, 1)
            if row.forcing:
                row.phase = self._complete_forced(row, out.text)
                continue
            if self._should_force(row, out.text, out.stop_string):
                row.turn += 1
                row.traj.stats.turns = row.turn
                row.pending_env, row.forcing = FORCED_ANSWER, True
                row.phase = Phase.INSERT
                continue
            row.turn += 1
            row.traj.stats.turns = row.turn
            action = parse_action(out.text, self.config.search)
            if action.kind == "invalid":
                row.traj.stats.invalid_actions += 1
            else:
                row.traj.stats.valid_actions += 1
            row.query = action.content if action.kind == "search" else ""
            if action.kind == "answer":
                row.traj.answer = action.content
            row.phase = self._decide(row, action)

    def _should_force(self, row: _Row, text: str, stop_string: str | None) -> bool:
        """`force_answer`: the final round closed its reasoning (and nothing else)."""
        return (
            self.config.force_answer
            and self.config.search
            and self._final_round(row)
            and (stop_string == THINK_CLOSE or text.rstrip().endswith(THINK_CLOSE))
            and parse_action(text, self.config.search).kind == "invalid"
        )

    def _complete_forced(self, row: _Row, text: str) -> Phase:
        """The policy's completion of the answer the engine opened."""
        row.forcing = False
        action = parse_action(FORCED_ANSWER + text, search=False)
        if action.kind != "answer":
            row.traj.stats.invalid_actions += 1
            return self._finish(row, "max_turns")
        row.traj.stats.valid_actions += 1
        row.traj.answer = action.content
        return self._finish(row, "answer")

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
