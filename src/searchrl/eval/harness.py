"""`searchrl eval`: run one method over question sets into a folder, resumably.

    DIR/run.json        method, model, the engine it resolved to, the search engine's identity
                        and the rollout settings (a rerun must match them)
    DIR/samples.jsonl   one row per question, appended a batch at a time (`eval.store`)
    DIR/summary.json    aggregates with 95% intervals over the questions asked for (`eval.summary`)

A rerun of the same command loads `samples.jsonl`, skips every question already there and only
generates the rest, so a killed run continues where it stopped and a finished one is not
redone (the model is not even loaded). A question whose retrieval failed is not written: it is
retried by the next run and counted as `missing` meanwhile, never silently dropped (Search-R1's
validation loader dropped the last partial batch).

A folder holds one configuration. `run.json` records what decides the rows: the method, the
model (a local path made absolute), the generation engine `model.backend=auto` resolved to on
this machine (HF with a bf16 copy, HF in fp32 or vLLM give different greedy answers), and the
search engine (an index's path, kind, corpus fingerprint and parameters, or a server's URL).
A rerun with anything else ends in one error before the folder is touched.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.config.eval import EvalConfig
from searchrl.config.loading import to_dict
from searchrl.config.model import ModelConfig
from searchrl.eval.evidence import failure_table, row_evidence
from searchrl.eval.methods import Context, Outcome, RecordingRetriever
from searchrl.eval.registry import MethodSpec, method
from searchrl.eval.store import SampleStore
from searchrl.eval.summary import summarize
from searchrl.models.loading import resolve_backend, resolve_device, resolve_dtype
from searchrl.models.precision import fast_bf16
from searchrl.retrieval.manifest import read_manifest
from searchrl.reward.metrics import answer_metrics
from searchrl.types import Question
from searchrl.utils.errors import SearchRLError
from searchrl.utils.progress import progress_bar


class EvalError(SearchRLError, ValueError):
    """A bad request (unknown method, missing index, a folder holding another run)."""


@dataclass
class Resources:
    """Opened lazily, only when there is something left to generate."""

    open_retriever: Callable[[], Any]
    load_policy: Callable[[], Any]
    retriever: dict[str, Any] | None = None
    """Identity of the search engine (`retriever_identity`), recorded in `run.json`; None
    for methods that never search."""


def retriever_identity(index: Path | None, url: str | None) -> dict[str, Any] | None:
    """What decides the passages a search returns: an index's absolute path, kind, corpus
    (sha256 and rows), build parameters and encoder; or a server's URL."""
    if url is not None:
        return {"url": url}
    if index is None:
        return None
    manifest = read_manifest(index)
    return {
        "index": str(Path(index).resolve()),
        "kind": manifest.kind,
        "corpus": {"sha256": manifest.corpus.sha256, "rows": manifest.corpus.rows},
        "params": manifest.params,
        "encoder": manifest.encoder,
    }


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def engine_identity(model: ModelConfig) -> dict[str, str]:
    """The generation engine `model` resolves to on this machine, the part of the model config
    that decides the rows (the rest are speed settings). `auto` is vLLM wherever it is
    installed, else HF, generating with a bf16 copy of fp32 weights where a probe
    measures bf16 faster (`models.precision`) and with the weights as they are elsewhere, so
    the same command can resolve differently on two machines."""
    backend = resolve_backend(model)
    device = resolve_device(model.device)
    weights = resolve_dtype(model.dtype, device)
    if backend == "vllm":  # the dtype it computes in, not the weights' on disk
        from searchrl.models.vllm_engine import engine_dtype

        return {"backend": "vllm", "dtype": engine_dtype(model, device)}
    if model.generation_dtype != "auto":
        generation = resolve_dtype(model.generation_dtype, device)
    else:  # as `models.loading.auto_generation_dtype` decides it
        fast = str(weights) == "torch.float32" and fast_bf16(device)
        generation = "bfloat16" if fast else weights
    return {
        "backend": "hf",
        "device": device.type,
        "weights": _dtype_name(weights),
        "generation": _dtype_name(generation),
    }


def _model_record(model: ModelConfig) -> dict[str, Any]:
    """Which weights (a local path made absolute); how they run is `engine_identity`'s."""
    path = Path(model.name_or_path)
    local = model.name_or_path != "embedded" and path.exists()
    return {
        "name_or_path": str(path.resolve()) if local else model.name_or_path,
        "gguf_file": model.gguf_file,
    }


def _run_record(config: EvalConfig, retriever: dict[str, Any] | None = None) -> dict[str, Any]:
    record = {
        "method": config.method,
        "model": _model_record(config.model),
        "engine": engine_identity(config.model),
        "retriever": retriever,
        "seed": config.seed,
        "rollout": to_dict(config.rollout),
        "reason_tokens": config.reason_tokens,
        "ircot_step_tokens": config.ircot_step_tokens,
    }
    if config.method == "search-r2":  # other methods' folders keep their old record
        record["refiner"] = to_dict(config.refiner)
    return record


LOADED_ENGINE = "loaded_engine"
"""run.json key: the backend class actually built (an `auto` vLLM that does not start falls
back to HF)."""


def _describe(value: Any) -> str:
    if isinstance(value, dict) and "index" in value:
        corpus = value["corpus"]["sha256"][:12]
        return f"{value['kind']} index {value['index']} (corpus sha256 {corpus}…)"
    if isinstance(value, dict) and "url" in value:
        return f"server {value['url']}"
    if isinstance(value, dict) and "backend" in value:
        return "/".join(str(v) for v in value.values())
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)


def check_run(out: Path, record: dict[str, Any]) -> bool:
    """Read-only: True when `out` already holds a run with exactly `record`'s settings,
    False when it holds none; an EvalError (nothing written) when it holds another."""
    path = out / "run.json"
    if not path.is_file():
        return False
    old = json.loads(path.read_text())
    changed = sorted(k for k in record if old.get(k) != record[k])
    if not changed:
        return True
    shown = [k for k in changed if k in ("method", "retriever", "engine")]
    detail = "; ".join(
        f"{k}: {_describe(old.get(k))} there, {_describe(record[k])} now" for k in shown
    )
    raise EvalError(
        f"{out} holds an evaluation with other settings ({', '.join(changed)})"
        + (f": {detail}" if detail else "")
        + "; use another --out folder or delete this one"
    )


def _settle_engine(out: Path, record: dict[str, Any], backend: Any) -> None:
    """After loading: refuse a folder made by another engine class (an `auto` engine that fell
    back to HF on one machine, not on another), else write `run.json` with the class it used."""
    loaded = type(backend).__name__
    path = out / "run.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    if old.get(LOADED_ENGINE, loaded) != loaded:
        raise EvalError(
            f"{out} was generated with {old[LOADED_ENGINE]}, but {loaded} was loaded here; "
            "use another --out folder"
        )
    if old.get(LOADED_ENGINE) == loaded:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**record, LOADED_ENGINE: loaded}, indent=2) + "\n")
    os.replace(tmp, path)


def sample_row(
    question: Question,
    outcome: Outcome,
    spec: MethodSpec,
    latency: float,
    documents: dict[str, str],
) -> dict[str, Any]:
    """One line of `samples.jsonl`: scores, the prediction, how the trajectory ended, what it
    searched and was shown (`eval.evidence`), the passages it retrieved and the trajectory."""
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
        **row_evidence(traj, documents),
        "documents": {d: documents[d] for d in sorted(seen) if d in documents},
        "trajectory": traj.to_json(),
    }
    if traj.refinement is not None:  # search-r2: the Actor's own answer, before the refiner
        actor = answer_metrics(traj.refinement.original_answer, question.golden_answers)
        row.update({f"actor_{k}": actor.get(k, 0.0) for k in ("em", "f1", "subem")})
        row["actor_prediction"] = traj.refinement.original_answer
        row["revised"] = traj.refinement.revised
    return row


def _check_questions(out: Path, questions: Sequence[Question], done: dict[str, Any]) -> None:
    """Refuse a folder whose rows hold other questions under the same ids (another world
    generated with the same id scheme, another version of a set)."""
    for q in questions:
        if q.uid in done and done[q.uid] not in (None, q.question):
            raise EvalError(
                f"{out} holds another question under id {q.uid!r} ({done[q.uid]!r}, not "
                f"{q.question!r}): other data; use another --out folder"
            )


def evaluate(
    config: EvalConfig,
    questions: Sequence[Question],
    out: Path,
    resources: Resources,
    on_batch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Evaluate `config.method` on `questions` into `out`; returns the summary (also written
    to `out/summary.json`), with `missing` = questions without a row (failed retrievals).
    `on_batch(n)` is told after each batch of n questions (a caller's own progress line)."""
    spec = method(config.method)
    record = _run_record(config, resources.retriever if spec.retrieval else None)
    check_run(out, record)  # before the lock: a refused folder is left exactly as it was
    store = SampleStore(out / "samples.jsonl")
    store.lock()
    try:
        check_run(out, record)  # again under the lock: another writer may have started
        done = {row["id"]: row.get("question") for row in store.load()}
        _check_questions(out, questions, done)
        todo = [q for q in questions if q.uid not in done]
        if todo:
            policy = resources.load_policy()
            _settle_engine(out, record, policy.backend)
            already = len(questions) - len(todo)
            _generate(config, spec, todo, store, resources, policy, already, on_batch)
        wanted = {q.uid for q in questions}
        rows = [row for row in store.load() if row["id"] in wanted]
    finally:
        store.unlock()
    summary = summarize(rows, config.bootstrap_resamples, config.confidence, config.seed)
    summary.update(method=spec.name, model=config.model.name_or_path)
    summary["failures"] = failure_table(rows)
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
    policy: Any,
    already: int,
    on_batch: Callable[[int], None] | None,
) -> None:
    """Run the method batch by batch, appending each finished batch to the store."""
    retriever = RecordingRetriever(resources.open_retriever()) if spec.retrieval else None
    ctx = Context(policy.backend, policy.tokenizer, retriever, config, policy.model)
    total = already + len(todo)
    bar = progress_bar(
        spec.name, total, enabled=config.progress, unit="questions", completed=already
    )
    size = max(config.batch_size, 1)
    by_uid = {q.uid: q for q in todo}

    def write(pairs: list[tuple[Question, Outcome]], seconds: float) -> None:
        """Append one chunk of finished questions; latency is the chunk's wall per question."""
        documents = retriever.documents if retriever is not None else {}
        latency = seconds / max(len(pairs), 1)
        rows = [
            sample_row(q, o, spec, latency, documents)
            for q, o in pairs
            if o.trajectory.stats.failed is None
        ]
        store.append(rows)
        advance(len(pairs))
        if on_batch is not None:
            on_batch(len(pairs))

    with bar as advance:
        tick = time.perf_counter()
        if spec.stream is not None:  # `size` questions in flight, written `size` at a time
            chunk: list[tuple[Question, Outcome]] = []
            for outcome in spec.stream(todo, ctx, size):
                chunk.append((by_uid[outcome.trajectory.uid], outcome))
                if len(chunk) == size:
                    write(chunk, time.perf_counter() - tick)
                    chunk, tick = [], time.perf_counter()
            if chunk:
                write(chunk, time.perf_counter() - tick)
            return
        for start in range(0, len(todo), size):
            batch = todo[start : start + size]
            outcomes = spec.run(batch, ctx)
            write(list(zip(batch, outcomes, strict=True)), time.perf_counter() - tick)
            if retriever is not None:
                retriever.documents.clear()
            tick = time.perf_counter()
