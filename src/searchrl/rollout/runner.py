"""What the `rollout` and `chat` commands do, as plain functions the CLI calls: open the search
engine, roll out a question file into a trajectory file, and summarize trajectories."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.config.rollout import RolloutConfig
from searchrl.models.generation import Generation, GenerationBackend, SamplingParams
from searchrl.models.loading import Policy
from searchrl.retrieval import RemoteRetriever, Retriever, load_index
from searchrl.rollout.io import write_trajectories
from searchrl.rollout.loop import Observer, run_rollouts
from searchrl.types import Question, Trajectory
from searchrl.utils.output import atomic_path


def open_retriever(index: Path | None, url: str | None) -> Retriever:
    """A local index directory (any kind `searchrl index` builds) or a remote `/retrieve`
    server; exactly one of the two."""
    if (index is None) == (url is None):
        raise ValueError("give exactly one of an index directory or a retrieval server URL")
    if url is not None:
        return RemoteRetriever(url)
    return load_index(index)


class MeteredBackend:
    """A generation backend that reports each call's row count (one turn of every active
    trajectory) to whoever is listening, so a long rollout can drive a progress bar without
    the rollout engine knowing about bars. Everything else is the wrapped backend's."""

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self._listener: Callable[[int], None] | None = None

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """Generate with the wrapped backend, then report `len(prompts)` turns done."""
        outputs = self.backend.generate(prompts, params)
        if self._listener is not None:
            self._listener(len(prompts))
        return outputs

    def collect(self) -> list[tuple[Any, Generation]]:
        """A streaming engine's finished rows (`rollout.streaming`), each reported as one
        turn done."""
        finished = self.backend.collect()  # type: ignore[attr-defined]
        if self._listener is not None and finished:
            self._listener(len(finished))
        return finished

    @contextlib.contextmanager
    def reporting(self, listener: Callable[[int], None]) -> Iterator[None]:
        """Send generated-turn counts to `listener` while the block runs."""
        self._listener = listener
        try:
            yield
        finally:
            self._listener = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


@dataclass(frozen=True)
class Summary:
    """Averages over a set of trajectories (what `searchrl rollout` prints)."""

    trajectories: int
    em: float
    f1: float
    subem: float
    answered: float
    """Share of trajectories that produced an `<answer>`."""
    searches: float
    turns: float
    response_tokens: float
    failed: int
    truncated: int
    seconds: float

    def rows(self) -> list[tuple[str, str]]:
        """(name, formatted value) pairs for a table."""
        return [
            ("trajectories", str(self.trajectories)),
            ("EM", f"{self.em:.3f}"),
            ("F1", f"{self.f1:.3f}"),
            ("SubEM", f"{self.subem:.3f}"),
            ("answered", f"{self.answered:.3f}"),
            ("searches / trajectory", f"{self.searches:.2f}"),
            ("turns / trajectory", f"{self.turns:.2f}"),
            ("response tokens / trajectory", f"{self.response_tokens:.1f}"),
            ("failed", str(self.failed)),
            ("truncated", str(self.truncated)),
            ("wall time (s)", f"{self.seconds:.1f}"),
        ]


def summarize(trajectories: Sequence[Trajectory], seconds: float = 0.0) -> Summary:
    """Mean metrics and behaviour counts over `trajectories`."""
    n = max(len(trajectories), 1)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / n

    return Summary(
        trajectories=len(trajectories),
        em=mean([t.metrics.get("em", 0.0) for t in trajectories]),
        f1=mean([t.metrics.get("f1", 0.0) for t in trajectories]),
        subem=mean([t.metrics.get("subem", 0.0) for t in trajectories]),
        answered=mean([float(t.answer is not None) for t in trajectories]),
        searches=mean([t.stats.searches for t in trajectories]),
        turns=mean([t.stats.turns for t in trajectories]),
        response_tokens=mean([len(t.response_ids) for t in trajectories]),
        failed=sum(t.stats.failed is not None for t in trajectories),
        truncated=sum(t.stats.truncated for t in trajectories),
        seconds=seconds,
    )


def rollout_to_file(
    policy: Policy,
    retriever: Retriever,
    questions: Sequence[Question],
    config: RolloutConfig,
    out: Path,
    *,
    n_samples: int,
    seed: int,
    force: bool = False,
    chunk: int = 0,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """Roll out every question `n_samples` times, `chunk` questions at a time (0: all at
    once), reporting each finished chunk's question count to `progress`; then write the
    trajectory file atomically (an existing `out` is replaced only with `force`) and
    summarize. Per-trajectory seeds make the result independent of the chunking."""
    started = time.perf_counter()
    step = chunk if chunk > 0 else max(len(questions), 1)
    trajectories: list[Trajectory] = []
    for start in range(0, len(questions), step):
        part = questions[start : start + step]
        trajectories += run_rollouts(
            policy.backend,
            policy.tokenizer,
            retriever,
            part,
            config,
            n_samples=n_samples,
            seed=seed,
        )
        if progress is not None:
            progress(len(part))
    with atomic_path(out, force=force) as tmp:
        write_trajectories(tmp, trajectories)
    return summarize(trajectories, time.perf_counter() - started)


def answer_question(
    policy: Policy,
    retriever: Retriever,
    question: str,
    config: RolloutConfig,
    *,
    uid: str,
    seed: int,
    observer: Observer,
) -> Trajectory:
    """One interactive question (no gold answer): `observer` sees each segment as it comes."""
    (trajectory,) = run_rollouts(
        policy.backend,
        policy.tokenizer,
        retriever,
        [Question(uid=uid, question=question, golden_answers=())],
        config,
        seed=seed,
        observer=observer,
    )
    return trajectory
