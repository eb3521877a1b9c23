"""Step metrics under Search-R1's names, stage timers, and the sinks they are written to.

Names follow Search-R1's verl logs (`critic/score/mean`, `actor/pg_loss`, `env/*`,
`state_tokens/coverage`, `timing_s/*`) so public training curves can be overlaid on ours.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from statistics import fmean
from typing import Any

from torch import Tensor

from searchrl.reward.hybrid import reward_metrics
from searchrl.types import Trajectory


def _reset_peak_rss() -> None:
    """Restart the kernel's peak-RSS counter of this process (Linux; a no-op elsewhere)."""
    with suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_gb() -> float:
    """Peak resident memory since the last reset, in GB (0 where /proc is unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return 0.0


class StageTimer:
    """Wall time (`timing_s/<name>`) and peak host memory (`perf/peak_rss_gb/<name>`) per
    named stage of one step. Stages may nest; the outer one reports the max of its inner
    peaks (the peak counter is reset when each stage starts)."""

    def __init__(self, on_enter: Callable[[str], None] | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.peaks: dict[str, float] = {}
        self.on_enter = on_enter
        """Told each stage's name as it starts (a progress bar shows what a long step does)."""

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.on_enter is not None:
            self.on_enter(name)
        start = time.perf_counter()
        _reset_peak_rss()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            peak = max([_peak_rss_gb(), *self.peaks.values()])
            self.peaks[name] = max(self.peaks.get(name, 0.0), peak)

    def metrics(self) -> dict[str, float]:
        """`timing_s/<stage>` and `perf/peak_rss_gb/<stage>` for every stage timed so far."""
        out = {f"timing_s/{k}": v for k, v in self.seconds.items()}
        out.update({f"perf/peak_rss_gb/{k}": v for k, v in self.peaks.items()})
        return out


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0


def drift_metrics(
    trajectories: Sequence[Trajectory], hops: Mapping[str, int | None]
) -> dict[str, float]:
    """What shows a drift while it happens: the share of trajectories that end without an
    answer, by stop reason (`rollout/no_answer/<reason>`, summing to `rollout/no_answer`), and
    searches per trajectory by the question's hop count (`env/searches_by_hops/<h>`)."""
    n = max(len(trajectories), 1)
    unanswered = [t for t in trajectories if t.answer is None]
    out = {"rollout/no_answer": len(unanswered) / n}
    for reason in sorted({t.stats.stop_reason or "unknown" for t in unanswered}):
        share = sum((t.stats.stop_reason or "unknown") == reason for t in unanswered) / n
        out[f"rollout/no_answer/{reason}"] = share
    by_hops: dict[int, list[int]] = {}
    for t in trajectories:
        h = hops.get(t.uid)
        if h is not None:
            by_hops.setdefault(h, []).append(t.stats.searches)
    for h, counts in sorted(by_hops.items()):
        out[f"env/searches_by_hops/{h}"] = _mean(counts)
    return out


def advantage_length_metrics(
    advantages: Tensor, mask: Tensor, rows: int | None = None
) -> dict[str, float]:
    """Mean trained (policy) tokens of rows whose advantage is positive vs negative
    (`adv/policy_len_pos`, `adv/policy_len_neg`): a length bias shows as a gap that grows
    step after step. advantages, mask: [N, R]; only the first `rows` rows are trajectories."""
    rows = advantages.shape[0] if rows is None else rows
    lengths = mask[:rows].sum(-1)  # [n]
    per_row = (advantages[:rows] * mask[:rows]).sum(-1) / lengths.clamp(min=1)  # [n]
    out = {}
    for name, chosen in (("pos", per_row > 0), ("neg", per_row < 0)):
        picked = lengths[chosen]
        out[f"adv/policy_len_{name}"] = float(picked.mean()) if picked.numel() else 0.0
    return out


def rollout_metrics(
    trajectories: Sequence[Trajectory], hops: Mapping[str, int | None] | None = None
) -> dict[str, float]:
    """Reward, length and search behaviour of one step's trajectories (`hops`: uid → hop
    count of the question, for the per-hop search counts)."""
    scores = [t.reward.get("score", 0.0) for t in trajectories]
    lengths = [len(t.response_ids) for t in trajectories]
    policy = [sum(t.loss_mask()) for t in trajectories]
    return {
        "critic/score/mean": _mean(scores),
        "critic/score/max": max(scores, default=0.0),
        "critic/score/min": min(scores, default=0.0),
        "reward/em": _mean([t.reward.get("em", 0.0) for t in trajectories]),
        "reward/f1": _mean([t.reward.get("f1", 0.0) for t in trajectories]),
        "reward/format_valid": _mean([t.reward.get("format_valid", 0.0) for t in trajectories]),
        "response_length/mean": _mean(lengths),
        "response_length/max": max(lengths, default=0),
        "response_length/clip_ratio": _mean([float(t.stats.truncated) for t in trajectories]),
        "env/number_of_valid_search": _mean([t.stats.searches for t in trajectories]),
        "env/number_of_actions/mean": _mean([t.stats.turns for t in trajectories]),
        "env/invalid_actions/mean": _mean([t.stats.invalid_actions for t in trajectories]),
        "env/finish_ratio": _mean([float(t.answer is not None) for t in trajectories]),
        "state_tokens/total": float(sum(policy)),
        "state_tokens/coverage": sum(policy) / max(sum(lengths), 1),
        **reward_metrics(trajectories),
        **drift_metrics(trajectories, hops or {}),
    }


def eval_metrics(
    trajectories: Sequence[Trajectory], sources: dict[str, str], prefix: str = "val"
) -> dict[str, float]:
    """Held-out EM per source (`val/test_score/<source>`, sources maps uid → source) and
    overall, plus format, search counts and length."""
    by_source: dict[str, list[float]] = {}
    for t in trajectories:
        source = sources.get(t.uid) or "all"
        by_source.setdefault(source, []).append(t.reward.get("em", 0.0))
    out = {f"{prefix}/test_score/{s}": _mean(v) for s, v in sorted(by_source.items())}
    out[f"{prefix}/em"] = _mean([t.reward.get("em", 0.0) for t in trajectories])
    out[f"{prefix}/f1"] = _mean([t.reward.get("f1", 0.0) for t in trajectories])
    out[f"{prefix}/format_valid"] = _mean([t.reward.get("format_valid", 0.0) for t in trajectories])
    out[f"{prefix}/searches"] = _mean([t.stats.searches for t in trajectories])
    out[f"{prefix}/response_length"] = _mean([len(t.response_ids) for t in trajectories])
    return out


class MetricsWriter:
    """Appends one JSON object per step to `metrics.jsonl`; mirrors to TensorBoard / W&B."""

    def __init__(self, out_dir: Path, tensorboard: bool, wandb_project: str, config: Any) -> None:
        self.path = out_dir / "metrics.jsonl"
        self._tb = None
        self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(out_dir / "tensorboard"))
        if wandb_project:
            import wandb

            self._wandb = wandb.init(project=wandb_project, dir=str(out_dir), config=config)

    def truncate_after(self, step: int) -> None:
        """On resume, drop rows of steps the checkpoint does not contain (they will be redone).

        A process killed while appending leaves a last line without its newline: that row
        belongs to a step after the checkpoint (rows are written before it) and is dropped
        too. The rewrite goes through a temporary file, so a kill now leaves the old log."""
        if not self.path.is_file():
            return
        *complete, _torn = self.path.read_text().split("\n")
        rows = [json.loads(line) for line in complete if line.strip()]
        kept = [r for r in rows if r.get("step", 0) <= step]
        partial = self.path.with_name(self.path.name + ".tmp")
        partial.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(partial, self.path)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """Record the metrics of `step`."""
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        """Flush and close the sinks."""
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def save_trajectories(path: Path, trajectories: Sequence[Trajectory]) -> None:
    """One JSON trajectory per line (the trajectory viewer reads these)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for t in trajectories:
            handle.write(json.dumps(t.to_json()) + "\n")
