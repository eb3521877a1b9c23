"""The prompted multi-step baselines: IRCoT and Search-o1, batched across questions.

Both build the same `Trajectory` as the rollout engine (prompt, then `policy` and `env`
segments appended as token ids), so they are scored, stored and shown like every other method.

IRCoT (Trivedi et al. 2023): retrieve with the question; then each reasoning line the model
writes is the next query, and the passages not shown yet are inserted after it. Departure: the
original rebuilds one prompt holding every paragraph so far before each sentence; here the
passages are interleaved where they were retrieved (same information, append-only, so the KV
cache is reused), and a line, not a spaCy sentence, is the reasoning step.

Search-o1 (Li et al. 2025): the model searches with `<search>` tags; each search's documents go
through a separate Reason-in-Documents generation whose condensed "Final Information" is what
gets inserted between `<information>` tags. Its tokens count as the method's cost
(`Outcome.aux_tokens`), not as trajectory tokens.

Budgets are the rollout config's: at most `max_turns` retrievals, `topk` passages each, the
token caps. A row that reaches the retrieval budget gets one last turn to answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from searchrl.data.templates import (
    INFORMATION_CLOSE,
    INFORMATION_OPEN,
    format_information,
    render_chat,
)
from searchrl.eval.methods import Context, Outcome, start_trajectory
from searchrl.eval.prompts import (
    SEARCH_LIMIT_FEEDBACK,
    final_information,
    ircot_prompt,
    reason_in_documents_prompt,
    search_o1_prompt,
)
from searchrl.models.generation import SamplingParams
from searchrl.retrieval.base import RetrievalError
from searchrl.reward.metrics import answer_metrics, extract_answer
from searchrl.rollout.parse import parse_action
from searchrl.rollout.sampler import encode_prompt, row_seed
from searchrl.types import Hit, Question, SearchCall, Trajectory

ANSWER_CLOSE = "</answer>"
_ANSWER_IS = re.compile(r"\banswer is:?\s*(\w.*?)\s*\.?\s*$", re.IGNORECASE | re.DOTALL)
_REASONING_CHARS = 2000
"""Reason-in-Documents sees at most this much of the reasoning so far (its most recent end)."""


@dataclass
class _Row:
    traj: Trajectory
    turn: int = 0
    done: bool = False
    final: bool = False
    """The retrieval budget is spent: the next turn is the last, and only an answer stops it."""
    shown: set[str] = field(default_factory=set)
    aux_tokens: int = 0


class _Steps:
    """Generation, retrieval and insertion for rows of one method, under the rollout budgets."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.cfg = ctx.config.rollout

    def _length(self, row: _Row) -> int:
        return len(row.traj.prompt_ids) + len(row.traj.response_ids)

    def generate(self, rows: list[_Row], stops: list[tuple[str, ...]], limits: list[int]) -> None:
        """One backend call for `rows`; each gets its output appended as a `policy` segment."""
        if not rows:
            return
        params = [
            SamplingParams(
                max_new_tokens=min(limit, self.cfg.max_total_tokens - self._length(row)),
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                seed=row_seed(self.ctx.config.seed, row.traj.id, row.turn),
                stop=stop,
                continues=True,
            )
            for row, stop, limit in zip(rows, stops, limits, strict=True)
        ]
        prompts = [row.traj.prompt_ids + row.traj.response_ids for row in rows]
        started = time.perf_counter()
        outputs = self.ctx.backend.generate(prompts, params)
        elapsed = time.perf_counter() - started
        for row, out in zip(rows, outputs, strict=True):
            row.traj.append("policy", out.text, out.token_ids)
            row.turn += 1
            row.traj.stats.turns = row.turn
            row.traj.stats.generation_s += elapsed
            if self._length(row) >= self.cfg.max_total_tokens:
                self.stop(row, "length", truncated=True)

    def search(self, rows: list[_Row], queries: list[str]) -> list[list[Hit]]:
        """One retriever call for every row's query; a failure fails (and ends) these rows."""
        if not rows:
            return []
        assert self.ctx.retriever is not None
        started = time.perf_counter()
        try:
            results = self.ctx.retriever.search(queries, self.cfg.topk)
        except RetrievalError as err:
            for row in rows:
                row.traj.stats.failed = f"retrieval: {err}"
                self.stop(row, "failed")
            return [[] for _ in rows]
        elapsed = time.perf_counter() - started
        for row, query, hits in zip(rows, queries, results, strict=True):
            row.traj.stats.retrieval_s += elapsed
            row.traj.stats.searches += 1
            doc_ids = [h.document.id for h in hits[: self.cfg.topk]]
            row.traj.searches.append(SearchCall(query=query, doc_ids=doc_ids, turn=row.turn))
        return [hits[: self.cfg.topk] for hits in results]

    def insert(self, row: _Row, text: str) -> None:
        """Append env text: an `<information>` block is cut to `max_obs_tokens` keeping its
        closing tag; text that does not fit under the total cap ends the row (truncated)."""
        tok = self.ctx.tokenizer
        ids = list(tok.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]
        if text.endswith(INFORMATION_CLOSE) and len(ids) > self.cfg.max_obs_tokens:
            close = list(tok.encode(INFORMATION_CLOSE, add_special_tokens=False))  # type: ignore[attr-defined]
            body = tok.encode(text[: -len(INFORMATION_CLOSE)], add_special_tokens=False)  # type: ignore[attr-defined]
            ids = list(body[: max(self.cfg.max_obs_tokens - len(close), 0)]) + close
            row.traj.stats.info_truncated += 1
        if self._length(row) + len(ids) > self.cfg.max_total_tokens:
            self.stop(row, "length", truncated=True)
            return
        decoded = tok.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]
        row.traj.append("env", decoded, ids)

    def stop(self, row: _Row, reason: str, *, truncated: bool = False) -> None:
        row.done = True
        row.traj.stats.stop_reason = row.traj.stats.stop_reason or reason
        row.traj.stats.truncated = row.traj.stats.truncated or truncated


def _answer(traj: Trajectory, answer_is: bool) -> str | None:
    """The last complete `<answer>` block inside one policy turn (never one pieced together
    across turns, as the rollout engine rules); IRCoT also accepts its own "the answer is X"
    ending of the last turn."""
    turns = [s.text for s in traj.segments if s.role == "policy"]
    answers = [a for a in (extract_answer(t) for t in turns) if a is not None]
    if answers:
        return answers[-1]
    if answer_is and turns:
        match = _ANSWER_IS.search(turns[-1].strip())
        return match.group(1).strip() if match else None
    return None


def _outcomes(rows: list[_Row], *, answer_is: bool) -> list[Outcome]:
    """Answer and metrics for every row."""
    outcomes = []
    for row in rows:
        answer = _answer(row.traj, answer_is)
        row.traj.answer = answer
        row.traj.metrics = answer_metrics(answer, row.traj.golden_answers)
        if not row.traj.stats.stop_reason:
            row.traj.stats.stop_reason = "answer" if answer is not None else "max_turns"
        outcomes.append(Outcome(row.traj, row.aux_tokens))
    return outcomes


def _show_new_passages(steps: _Steps, rows: list[_Row], queries: list[str]) -> None:
    """IRCoT retrieval: search every query at once, insert only passages not shown before."""
    for row, hits in zip(rows, steps.search(rows, queries), strict=True):
        if row.done:
            continue
        new = [h for h in hits if h.document.id not in row.shown]
        row.shown.update(h.document.id for h in new)
        if new:
            steps.insert(row, format_information([h.document.contents for h in new]))


def _query_of(line: str) -> str:
    """A reasoning line as a query: tags and surrounding whitespace removed."""
    return re.sub(r"</?\w+>", " ", line).strip()


def run_ircot(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """IRCoT: retrieve with the question, then with each reasoning line, until an answer."""
    steps = _Steps(ctx)
    cfg = ctx.config.rollout
    rows = [_Row(start_trajectory(q, ircot_prompt(q.question), ctx)) for q in questions]
    _show_new_passages(steps, rows, [q.question for q in questions])
    for _ in range(2 * cfg.max_turns + 2):  # empty lines do not search; bound them too
        active = [r for r in rows if not r.done]
        if not active:
            break
        stops = [(ANSWER_CLOSE,) if r.final else ("\n", ANSWER_CLOSE) for r in active]
        limits = [
            cfg.max_response_tokens if r.final else ctx.config.ircot_step_tokens for r in active
        ]
        steps.generate(active, stops, limits)
        pending: list[tuple[_Row, str]] = []
        for row in (r for r in active if not r.done):
            line = row.traj.segments[-1].text
            if row.final or ANSWER_CLOSE in line or _ANSWER_IS.search(line):
                steps.stop(row, "answer" if ANSWER_CLOSE in line else "final")
            elif row.traj.stats.searches >= cfg.max_turns:
                row.final = True
            elif _query_of(line):
                pending.append((row, _query_of(line)))
        _show_new_passages(steps, [r for r, _ in pending], [q for _, q in pending])
    return _outcomes(rows, answer_is=True)


def run_search_o1(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """Search-o1: `<search>` actions, each answered by a Reason-in-Documents summary."""
    steps = _Steps(ctx)
    cfg = ctx.config.rollout
    prompts = [search_o1_prompt(q.question, cfg.max_turns) for q in questions]
    rows = [_Row(start_trajectory(q, p, ctx)) for q, p in zip(questions, prompts, strict=True)]
    for _ in range(cfg.max_turns + 2):
        active = [r for r in rows if not r.done]
        if not active:
            break
        steps.generate(active, [cfg.stop] * len(active), [cfg.max_response_tokens] * len(active))
        pending: list[tuple[_Row, str]] = []
        for row in (r for r in active if not r.done):
            action = parse_action(row.traj.segments[-1].text)
            if row.final or action.kind != "search":
                steps.stop(row, "answer" if action.kind == "answer" else "no_search")
            elif row.traj.stats.searches >= cfg.max_turns:
                row.final = True
                steps.insert(row, SEARCH_LIMIT_FEEDBACK)
            else:
                pending.append((row, action.content))
        searched = [r for r, _ in pending]
        queries = [q for _, q in pending]
        _reason_in_documents(steps, searched, queries, steps.search(searched, queries))
    return _outcomes(rows, answer_is=False)


def _reason_in_documents(
    steps: _Steps, rows: list[_Row], queries: list[str], results: list[list[Hit]]
) -> None:
    """One batched generation condensing each row's documents; the result is inserted."""
    ctx, cfg = steps.ctx, steps.cfg
    live = [(r, q, h) for r, q, h in zip(rows, queries, results, strict=True) if not r.done]
    if not live:
        return
    chat = cfg.use_chat_template
    prompts, params = [], []
    for row, query, hits in live:
        reasoning = row.traj.response_text[-_REASONING_CHARS:]
        text = reason_in_documents_prompt(reasoning, query, [h.document.contents for h in hits])
        prompt = render_chat(ctx.tokenizer, text) if chat else text  # type: ignore[arg-type]
        prompts.append(encode_prompt(ctx.tokenizer, prompt, chat))
        seed = row_seed(ctx.config.seed, row.traj.id + "/reason", row.turn)
        params.append(
            SamplingParams(ctx.config.reason_tokens, cfg.temperature, cfg.top_p, seed, ())
        )
    started = time.perf_counter()
    outputs = ctx.backend.generate(prompts, params)
    elapsed = time.perf_counter() - started
    for (row, _, _), out in zip(live, outputs, strict=True):
        row.aux_tokens += len(out.token_ids)
        row.traj.stats.generation_s += elapsed
        clean = ctx.tokenizer.decode(out.token_ids, skip_special_tokens=True)  # type: ignore[attr-defined]
        steps.insert(row, f"{INFORMATION_OPEN}{final_information(clean)}{INFORMATION_CLOSE}")
