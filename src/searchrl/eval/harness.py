"""`searchrl eval`: run one method over question sets into a folder, resumably.

    DIR/run.json        method, model and rollout settings (a rerun must match them)
    DIR/samples.jsonl   one row per question, appended a batch at a time (`eval.store`)
    DIR/summary.json    aggregates with 95% intervals over the questions asked for (`eval.summary`)

A rerun of the same command loads `samples.jsonl`, skips every question already there and only
generates the rest, so a killed run continues where it stopped and a finished one is not
redone (the model is not even loaded). A question whose retrieval failed is not written: it is
retried by the next run and counted as `missing` meanwhile, never silently dropped (Search-R1's
validation loader dropped the last partial batch).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.config.eval import EvalConfig
from searchrl.config.loading import to_dict
from searchrl.data.benchmarks import DataError, load_hf_dataset, load_questions
from searchrl.eval.methods import Context, Outcome, RecordingRetriever
from searchrl.eval.registry import MethodSpec, method
from searchrl.eval.store import SampleStore
from searchrl.eval.summary import summarize
from searchrl.reward.metrics import answer_metrics
from searchrl.types import Question
from searchrl.utils.errors import SearchRLError
from searchrl.utils.progress import progress_bar

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class EvalError(SearchRLError, ValueError):
    """A bad request (unknown method, missing index, a folder holding another run)."""


def load_sets(sources: Sequence[str], limit: int) -> list[Question]:
    """Questions of every source, the first `limit` of each set (0 = all): a file (FlashRAG
    JSONL, Search-R1 parquet, a world split), a folder of such files, or `hf:NAME[:SPLIT]`
    (the FlashRAG collection on the Hub, where it is reachable)."""
    questions: list[Question] = []
    for source in sources:
        for loaded in _load_source(source):
            by_set: dict[str, list[Question]] = {}
            for q in loaded:
                by_set.setdefault(q.source, []).append(q)
            for group in by_set.values():
                questions.extend(group[:limit] if limit > 0 else group)
    seen: set[str] = set()
    for q in questions:
        if q.uid in seen:
            raise DataError(f"question {q.uid!r} is given twice (the same set twice?)")
        seen.add(q.uid)
    return questions


def _load_source(source: str) -> Iterator[list[Question]]:
    if source.startswith("hf:"):
        name, _, split = source[3:].partition(":")
        yield load_hf_dataset(name, split or None)
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in DATA_SUFFIXES)
        if not files:
            raise DataError(f"{path}: no .jsonl or .parquet files")
        for file in files:
            yield load_questions(file)
        return
    yield load_questions(path)


@dataclass
class Resources:
    """Opened lazily, only when there is something left to generate."""

    open_retriever: Callable[[], Any]
    load_policy: Callable[[], Any]


def _run_record(config: EvalConfig) -> dict[str, Any]:
    record = {
        "method": config.method,
        "model": to_dict(config.model),
        "seed": config.seed,
        "rollout": to_dict(config.rollout),
        "reason_tokens": config.reason_tokens,
        "ircot_step_tokens": config.ircot_step_tokens,
    }
    if config.method == "search-r2":  # other methods' folders keep their old record
        record["refiner"] = to_dict(config.refiner)
    return record


def _check_run(out: Path, config: EvalConfig) -> None:
    """A folder holds one configuration: refuse to mix another one's samples into it."""
    record = _run_record(config)
    path = out / "run.json"
    if path.is_file():
        old = json.loads(path.read_text())
        if old != record:
            changed = sorted(k for k in record if old.get(k) != record[k])
            raise EvalError(
                f"{out} holds an evaluation with other settings ({', '.join(changed)}); "
                "use another --out folder or delete this one"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def sample_row(
    question: Question,
    outcome: Outcome,
    spec: MethodSpec,
    latency: float,
    documents: dict[str, str],
) -> dict[str, Any]:
    """One line of `samples.jsonl`."""
    traj = outcome.trajectory
    seen = {d for call in traj.searches for d in call.doc_ids}
    row = {
        "id": question.uid,
        "set": question.source,
        "method": spec.name,
        "question": question.question,
        "golden_answers": list(question.golden_answers),
        "hops": question.hops,
        "prediction": traj.answer,
        "em": traj.metrics.get("em", 0.0),
        "f1": traj.metrics.get("f1", 0.0),
        "subem": traj.metrics.get("subem", 0.0),
        "searches": traj.stats.searches,
        "turns": traj.stats.turns,
        "tokens": traj.stats.policy_tokens + outcome.aux_tokens,
        "latency": latency,
        "stop_reason": traj.stats.stop_reason,
        "documents": {d: documents[d] for d in sorted(seen) if d in documents},
        "trajectory": traj.to_json(),
    }
    if traj.refinement is not None:  # search-r2: the Actor's own answer, before the refiner
        actor = answer_metrics(traj.refinement.original_answer, question.golden_answers)
        row.update({f"actor_{k}": actor.get(k, 0.0) for k in ("em", "f1", "subem")})
        row["actor_prediction"] = traj.refinement.original_answer
        row["revised"] = traj.refinement.revised
    return row


def evaluate(
    config: EvalConfig, questions: Sequence[Question], out: Path, resources: Resources
) -> dict[str, Any]:
    """Evaluate `config.method` on `questions` into `out`; returns the summary (also written
    to `out/summary.json`), with `missing` = questions without a row (failed retrievals)."""
    spec = method(config.method)
    store = SampleStore(out / "samples.jsonl")
    store.lock()
    try:
        _check_run(out, config)
        done = {row["id"] for row in store.load()}
        todo = [q for q in questions if q.uid not in done]
        if todo:
            _generate(config, spec, todo, store, resources, len(questions) - len(todo))
        wanted = {q.uid for q in questions}
        rows = [row for row in store.load() if row["id"] in wanted]
    finally:
        store.unlock()
    summary = summarize(rows, config.bootstrap_resamples, config.confidence, config.seed)
    summary.update(method=spec.name, model=config.model.name_or_path)
    summary["missing"] = len(questions) - len(rows)
    path = out / "summary.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)
    return summary


def _generate(
    config: EvalConfig,
    spec: MethodSpec,
    todo: list[Question],
    store: SampleStore,
    resources: Resources,
    already: int,
) -> None:
    """Run the method batch by batch, appending each finished batch to the store."""
    retriever = RecordingRetriever(resources.open_retriever()) if spec.retrieval else None
    policy = resources.load_policy()
    ctx = Context(policy.backend, policy.tokenizer, retriever, config, policy.model)
    total = already + len(todo)
    bar = progress_bar(
        spec.name, total, enabled=config.progress, unit="questions", completed=already
    )
    with bar as advance:
        for start in range(0, len(todo), max(config.batch_size, 1)):
            batch = todo[start : start + max(config.batch_size, 1)]
            tick = time.perf_counter()
            outcomes = spec.run(batch, ctx)
            latency = (time.perf_counter() - tick) / len(batch)
            documents = retriever.documents if retriever is not None else {}
            rows = [
                sample_row(q, o, spec, latency, documents)
                for q, o in zip(batch, outcomes, strict=True)
                if o.trajectory.stats.failed is None
            ]
            store.append(rows)
            if retriever is not None:
                retriever.documents.clear()
            advance(len(batch))
