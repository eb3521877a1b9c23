"""Which questions RL spends its rollouts on, and which it probes (`config.screen`,
`config.signal`).

Screening: a GRPO group teaches only when its rewards differ. A question the start policy
always solves, or never does, gives flat groups step after step; on the CPU recipe's worlds
three quarters of the sampled groups were flat. So before RL every question of the pool is
rolled out `screen.samples` times at the rollout temperature by the start policy, and only
those whose scores differ among their samples are kept. Verdicts go to a cache keyed by the
start policy's weights, the rollout and reward settings, the seed and k (one JSON file, with
one entry per question: its text and answers hashed), written after every chunk: a killed
screening resumes, and every run from the same warm start reuses it.

The probe: the held-out questions `train.signal` samples every few steps, never among the
trained ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from torch import nn

from searchrl.config.loading import to_dict
from searchrl.config.train import TrainConfig
from searchrl.data.benchmarks import DataError
from searchrl.data.grounded import answer_recall
from searchrl.data.sources import load_sources
from searchrl.models.weights import weights_digest
from searchrl.retrieval.base import Retriever
from searchrl.reward.outcome import RewardFn
from searchrl.reward.scoring import score_batch
from searchrl.train.models import evaluating, merged_for_export
from searchrl.train.ports import Distributed, RolloutFn
from searchrl.types import Question
from searchrl.utils.progress import progress_bar

CHUNK = 32
"""Questions rolled out per call while screening (and per cache write)."""


def probe_questions(config: TrainConfig, split: Callable[[str], list[Question]]) -> list[Question]:
    """The probe's held-out questions: `signal.probe_files`, else the world's
    `signal.probe_split` (read through `split`); none when the probe is off, or when there is
    no world to take the split from (own questions without `signal.probe_files`: one line
    says so and the run goes on without a probe)."""
    signal = config.signal
    if not signal.probe_every or not signal.probe_questions:
        return []
    if signal.probe_files:
        questions = load_sources(signal.probe_files, "probe", config.data.mix_seed)
    else:
        try:
            questions = split(signal.probe_split)
        except DataError:
            print(f"searchrl: no probe: no world to take its {signal.probe_split!r} split from; "
                  "signal.probe_files=FILE[a:b] probes held-out questions of yours",
                  file=sys.stderr)  # fmt: skip
            return []
    return list(questions[: signal.probe_questions])


def check_disjoint(pool: Sequence[Question], probe: Sequence[Question]) -> None:
    """A probe question that is also trained on would measure memorisation, not learning."""
    shared = {q.uid for q in pool} & {q.uid for q in probe}
    if shared:
        raise DataError(
            f"signal.probe_files: {len(shared)} probe questions are in the training pool "
            f"(e.g. {sorted(shared)[0]}); probe held-out questions"
        )


def gold_retrieved(
    questions: Sequence[Question], retriever: Retriever, topk: int
) -> list[Question]:
    """The questions whose gold answer appears in the passages their own text retrieves."""
    kept: list[Question] = []
    for start in range(0, len(questions), 64):
        part = questions[start : start + 64]
        results = retriever.search([q.question for q in part], topk)
        kept += [q for q, hits in zip(part, results, strict=True)
                 if answer_recall(hits[:topk], q.golden_answers)]  # fmt: skip
    return kept


def _digest(*parts: object) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _question_key(question: Question) -> str:
    return _digest(question.question, sorted(question.golden_answers))


def cache_file(config: TrainConfig, policy: nn.Module) -> Path:
    """The verdict cache of this start policy and these settings."""
    merged = merged_for_export(policy)
    weights = _digest(weights_digest(merged))
    settings = _digest(
        weights, to_dict(config.rollout), to_dict(config.reward), config.screen.samples,
        config.seed,
    )  # fmt: skip
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(config.screen.cache_dir or Path(base) / "searchrl" / "screen")
    return root / f"{settings}.json"


def _write(path: Path, verdicts: dict[str, dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(verdicts))
    os.replace(partial, path)


def screen_pool(
    questions: Sequence[Question],
    rollout: RolloutFn,
    reward: RewardFn,
    policy: nn.Module,
    config: TrainConfig,
    *,
    show: bool = True,
) -> tuple[list[Question], dict[str, float], dict[str, dict]]:
    """(kept questions, `screen/*` metrics, verdicts by uid). Without screening, every
    question is kept and nothing runs."""
    screen = config.screen
    if not screen.samples:
        return list(questions), {}, {}
    order = list(questions)
    random.Random(config.seed).shuffle(order)
    if screen.max_questions:
        order = order[: screen.max_questions]
    path = cache_file(config, policy)
    cached: dict[str, dict] = json.loads(path.read_text()) if path.is_file() else {}
    todo = [q for q in order if _question_key(q) not in cached]
    started = time.perf_counter()
    done = len(order) - len(todo)
    with progress_bar("screening", len(order), enabled=show, unit="questions",
                      completed=done) as tick:  # fmt: skip
        for start in range(0, len(todo), CHUNK):
            part = todo[start : start + CHUNK]
            with evaluating(policy):
                trajectories = rollout(
                    part, n_samples=screen.samples, seed=config.seed * 31 + start, greedy=False
                )
            breakdowns = score_batch(reward, trajectories)
            for q in part:
                mine = [(t, b) for t, b in zip(trajectories, breakdowns, strict=True)
                        if t.uid == q.uid]  # fmt: skip
                cached[_question_key(q)] = {
                    "scores": [b["score"] for _, b in mine],
                    "successes": sum(t.metrics.get("em", 0.0) > 0 for t, _ in mine),
                    "failed": sum(t.stats.failed is not None for t, _ in mine),
                }
            _write(path, cached)
            tick(len(part))
    verdicts = {q.uid: {**cached[_question_key(q)], "hops": q.hops} for q in order}
    kept = [q for q in order if _informative(verdicts[q.uid])]
    metrics = _screen_metrics(verdicts, len(kept), screen.samples)
    metrics["screen/seconds"] = time.perf_counter() - started
    if not kept:
        raise DataError(
            f"screen.samples={screen.samples}: the start policy gave every one of the "
            f"{len(order)} screened questions the same score in all its samples; nothing "
            "is left to train on (screen.samples=0 trains on all of them)"
        )
    return kept, metrics, verdicts


def _informative(verdict: dict) -> bool:
    """Scores that differ among the samples, none lost to a failed retrieval."""
    return not verdict["failed"] and len(set(verdict["scores"])) > 1


def _screen_metrics(verdicts: dict[str, dict], kept: int, k: int) -> dict[str, float]:
    """How the pool split: kept, always solved, never solved, and the kept share per hop."""
    n = max(len(verdicts), 1)
    out = {
        "screen/questions": float(len(verdicts)),
        "screen/kept": float(kept),
        "screen/kept_share": kept / n,
        "screen/always_solved": sum(v["successes"] == k for v in verdicts.values()) / n,
        "screen/never_solved": sum(v["successes"] == 0 for v in verdicts.values()) / n,
        "screen/pass@1": sum(v["successes"] for v in verdicts.values()) / (n * k),
    }
    by_hops = Counter(v["hops"] for v in verdicts.values() if v["hops"] is not None)
    for hops, total in sorted(by_hops.items()):
        mine = [v for v in verdicts.values() if v["hops"] == hops]
        out[f"screen/kept_share/hops_{hops}"] = sum(map(_informative, mine)) / total
    return out


def screen(
    questions: list[Question],
    rollout: RolloutFn,
    reward: RewardFn,
    policy: nn.Module,
    config: TrainConfig,
    out_dir: Path,
    dist: Distributed,
) -> tuple[list[Question], dict[str, float]]:
    """The screened pool (`train.pool`) and its `screen/*` metrics: rank 0 screens, the
    others then read its verdicts from the shared cache; `screen.json` in the run folder
    keeps them."""
    if not config.screen.samples:
        return questions, {}
    main = dist.rank == 0
    if main:
        kept, metrics, verdicts = screen_pool(
            questions, rollout, reward, policy, config, show=config.logging.progress
        )
        record = {"metrics": metrics, "verdicts": verdicts}
        (out_dir / "screen.json").write_text(json.dumps(record, indent=1) + "\n")
    dist.barrier()
    if not main:
        kept, metrics, _ = screen_pool(questions, rollout, reward, policy, config, show=False)
    return kept, metrics
