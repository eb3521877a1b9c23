"""The learning signal of a run, measured as it goes (`config.signal`).

- `SignalBudget`: informative GRPO groups sampled and trained, in all and per hour of RL steps
  (`signal/*_total`, `signal/informative_per_hour`). A flat group (all rewards equal) has zero
  advantage everywhere: it costs its rollouts and gives no gradient.
- `Anchor`: how far the trained weights have moved from where the run started, ‖θ − θ₀‖ over
  the weights the optimizer changes (`signal/moved`, and relative to ‖θ₀‖ of the same
  modules, `signal/moved_rel`). For LoRA policies it is the norm of the effective change of
  the adapted weights, ‖s·B·A‖, so full fine-tuning and LoRA are measured alike.
- `Probe`: fixed held-out questions sampled at the rollout temperature every
  `signal.probe_every` steps: pass@1 and pass@k (`probe/*`), the quantity RL optimises, which
  moves before greedy EM does; and the KL from the start policy on the first probe's
  trajectories (`signal/probe_kl`): those were sampled from π₀, so the mean over their policy
  tokens of log π₀ − log π_θ estimates KL(π₀ ‖ π_θ) without bias.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from searchrl.config.train import TrainConfig
from searchrl.train.collate import collate
from searchrl.train.logprobs import batched_logprobs
from searchrl.train.models import evaluating
from searchrl.train.ports import RolloutFn
from searchrl.train.sampling import groups_of
from searchrl.types import Question, Trajectory


@dataclass
class SignalBudget:
    """Running totals of a run's groups and the wall time of its RL steps (checkpointed, so a
    resumed run keeps counting where it stopped)."""

    sampled: int = 0
    informative: int = 0
    trained: int = 0
    trajectories: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def add(
        self, counts: dict[str, float], trajectories: int, seconds: float, cpu_seconds: float = 0.0
    ) -> dict[str, float]:
        """Count one step (its `train/groups_*` counters, the trajectories it trained on, its
        wall seconds and the CPU seconds of this process and its engine's) → the running
        `signal/*` metrics. The CPU-hour rate is the one to compare on a shared machine, where
        wall time depends on what else runs."""
        self.sampled += int(counts.get("train/groups_sampled", 0))
        self.informative += int(counts.get("train/groups_informative", 0))
        self.trained += int(counts.get("train/groups_trained", 0))
        self.trajectories += trajectories
        self.seconds += seconds
        self.cpu_seconds += cpu_seconds
        hours = max(self.seconds, 1e-9) / 3600
        cpu_hours = max(self.cpu_seconds, 1e-9) / 3600
        return {
            "signal/sampled_total": float(self.sampled),
            "signal/informative_total": float(self.informative),
            "signal/trained_total": float(self.trained),
            "signal/trajectories_total": float(self.trajectories),
            "signal/informative_share": self.informative / max(self.sampled, 1),
            "signal/informative_per_hour": self.trained / hours,
            "signal/trajectories_per_hour": self.trajectories / hours,
            "signal/informative_per_cpu_hour": self.trained / cpu_hours,
        }

    def state(self) -> dict[str, float]:
        return dict(vars(self))

    def load_state(self, state: dict[str, float]) -> None:
        for key, value in state.items():
            setattr(self, key, type(getattr(self, key))(value))


def _lora_delta_sq(module: nn.Module) -> tuple[float, float] | None:
    """(‖s·B·A‖², ‖W₀‖²) of a peft LoRA layer, or None for any other module. The square norm
    of the product comes from two r×r matrices, (BᵀB)∘(AAᵀ) summed, never the [out, in]
    product itself."""
    lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
    if not lora_a or not lora_b or "default" not in lora_a:
        return None
    a = lora_a["default"].weight.detach().float()  # [r, in]
    b = lora_b["default"].weight.detach().float()  # [out, r]
    scale = float(module.scaling["default"])  # type: ignore[index]
    delta = scale**2 * float(((b.T @ b) * (a @ a.T)).sum())
    base = module.get_base_layer().weight.detach().float()  # type: ignore[operator]
    return delta, float(base.pow(2).sum())


@dataclass
class Anchor:
    """θ₀ of the weights the optimizer trains, kept to measure ‖θ − θ₀‖ (a LoRA policy keeps
    nothing: its adapters start at B = 0, so the effective change is s·B·A itself)."""

    policy: nn.Module
    start: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self._lora_layers():
            self.start = {
                name: p.detach().clone()
                for name, p in self.policy.named_parameters()
                if p.requires_grad
            }

    def _lora_layers(self) -> list[nn.Module]:
        return [m for m in self.policy.modules() if _lora_delta_sq(m) is not None]

    def metrics(self) -> dict[str, float]:
        """`signal/moved` = ‖θ − θ₀‖ and `signal/moved_rel` = ‖θ − θ₀‖ / ‖θ₀‖."""
        moved_sq = base_sq = 0.0
        layers = self._lora_layers()
        if layers:
            for module in layers:
                delta, base = _lora_delta_sq(module)  # type: ignore[misc]
                moved_sq, base_sq = moved_sq + delta, base_sq + base
        else:
            params = dict(self.policy.named_parameters())
            for name, start in self.start.items():
                moved_sq += float((params[name].detach() - start).float().pow(2).sum())
                base_sq += float(start.float().pow(2).sum())
        moved = math.sqrt(moved_sq)
        return {"signal/moved": moved, "signal/moved_rel": moved / max(math.sqrt(base_sq), 1e-12)}


def pass_at_k(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """pass@1 (mean success over every sample) and pass@k (share of questions with at least
    one success among their `probe/k` samples), searches and answered share."""
    groups = groups_of(trajectories)
    success = [[t.metrics.get("em", 0.0) > 0 for t in g] for g in groups]
    n = max(sum(len(s) for s in success), 1)
    k = max((len(s) for s in success), default=0)
    out = {
        "probe/pass@1": sum(sum(s) for s in success) / n,
        "probe/pass@k": sum(any(s) for s in success) / max(len(success), 1),
        "probe/k": float(k),
        "probe/searches": sum(t.stats.searches for t in trajectories) / max(len(trajectories), 1),
        "probe/answered": sum(t.answer is not None for t in trajectories)
        / max(len(trajectories), 1),
    }
    return out


@dataclass
class Probe:
    """Fixed held-out questions, sampled `samples` times each at every probe (same seed every
    time, so two probes differ by the policy only as far as sampling allows)."""

    questions: Sequence[Question]
    samples: int
    seed: int
    pad_id: int
    micro_batch_size: int = 8
    bf16: bool = False
    temperature: float = 1.0
    first: list[Trajectory] = field(default_factory=list)
    """The first probe's trajectories (π₀'s samples): the KL probe."""
    first_logp: Tensor | None = None  # [N, R] log π₀ of their tokens

    def run(
        self, rollout: RolloutFn, policy: nn.Module, hops: dict[str, int | None]
    ) -> tuple[dict[str, float], list[Trajectory]]:
        """One probe: sample, pass@k (exact match of the answer, whatever the training
        reward), then the KL from the first probe's policy."""
        with evaluating(policy):
            trajectories = rollout(
                self.questions, n_samples=self.samples, seed=self.seed, greedy=False
            )
        metrics = pass_at_k(trajectories)
        metrics.update(_pass_by_hops(trajectories, hops))
        if not self.first:
            self.first = [t for t in trajectories if t.stats.failed is None]
            self.first_logp = self._logprobs(policy)
        metrics.update(self.kl(policy))
        return metrics, trajectories

    def _logprobs(self, policy: nn.Module) -> Tensor:
        batch = collate(self.first, self.pad_id)
        with evaluating(policy):
            return batched_logprobs(
                policy, batch, self.micro_batch_size, self.temperature, self.bf16, batch.policy_mask
            )

    def kl(self, policy: nn.Module) -> dict[str, float]:
        """KL(π₀ ‖ π_θ) per policy token on π₀'s samples: k1 (unbiased) and k3 (low variance,
        always ≥ 0)."""
        if not self.first or self.first_logp is None:
            return {}
        mask = collate(self.first, self.pad_id).policy_mask.float()  # [N, R]
        now = self._logprobs(policy)
        log_ratio = (self.first_logp - now) * mask  # log π₀/π_θ on π₀'s samples
        tokens = max(float(mask.sum()), 1.0)
        k3 = (torch.exp(-log_ratio) - 1 + log_ratio) * mask
        return {
            "signal/probe_kl": float(log_ratio.sum()) / tokens,
            "signal/probe_kl_k3": float(k3.sum()) / tokens,
        }

    def state(self) -> dict[str, object]:
        """The KL probe (π₀'s trajectories and their log-probs) for an exact resume."""
        return {
            "first": [t.to_json() for t in self.first],
            "first_logp": self.first_logp,
        }

    def load_state(self, state: dict[str, object]) -> None:
        self.first = [Trajectory.from_json(row) for row in state["first"]]  # type: ignore[union-attr]
        self.first_logp = state["first_logp"]  # type: ignore[assignment]


def _pass_by_hops(
    trajectories: Sequence[Trajectory], hops: dict[str, int | None]
) -> dict[str, float]:
    """`probe/pass@1/hops_<h>` for every hop count among the probe questions."""
    by_hops: dict[int, list[float]] = {}
    for t in trajectories:
        h = hops.get(t.uid)
        if h is not None:
            by_hops.setdefault(h, []).append(float(t.metrics.get("em", 0.0) > 0))
    return {f"probe/pass@1/hops_{h}": sum(v) / len(v) for h, v in sorted(by_hops.items())}


@dataclass
class SignalMeter:
    """The three measures of one run together: the budget and the distance after every step,
    the probe every `every` steps (0: never)."""

    anchor: Anchor
    probe: Probe | None
    every: int
    budget: SignalBudget = field(default_factory=SignalBudget)

    @classmethod
    def for_run(
        cls, config: TrainConfig, policy: nn.Module, questions: Sequence[Question], pad_id: int,
        bf16: bool, temperature: float,
    ) -> SignalMeter:  # fmt: skip
        """The meter `config.signal` asks for: a probe only with a period and questions."""
        signal, probe = config.signal, None
        if signal.probe_every and questions:
            probe = Probe(
                questions, signal.probe_samples, config.seed * 7_919 + 1, pad_id,
                config.micro_batch_size, bf16, temperature,
            )  # fmt: skip
        return cls(Anchor(policy), probe, signal.probe_every)

    def after_step(
        self, counts: dict[str, float], trajectories: int, seconds: float, cpu_seconds: float
    ) -> dict[str, float]:
        """`signal/*` after one step (its group counters, trained trajectories, wall and CPU
        time)."""
        budget = self.budget.add(counts, trajectories, seconds, cpu_seconds)
        return {**budget, **self.anchor.metrics()}

    def run_probe(
        self, rollout: RolloutFn, policy: nn.Module, hops: dict[str, int | None]
    ) -> tuple[dict[str, float], list[Trajectory]]:
        """The probe now, timed as `timing_s/probe` (not counted in the budget's hours)."""
        assert self.probe is not None
        started = time.perf_counter()
        metrics, trajectories = self.probe.run(rollout, policy, hops)
        metrics["timing_s/probe"] = time.perf_counter() - started
        return metrics, trajectories

    def probe_due(self, step: int, last: bool) -> bool:
        """Whether to probe after `step` (0: before the first step)."""
        return self.probe is not None and (step == 0 or last or step % self.every == 0)

    def state(self) -> dict[str, object]:
        probe = self.probe.state() if self.probe is not None else {}
        return {"budget": self.budget.state(), "probe": probe}

    def load_state(self, state: dict[str, object]) -> None:
        self.budget.load_state(state["budget"])  # type: ignore[arg-type]
        if self.probe is not None and state.get("probe"):
            self.probe.load_state(state["probe"])  # type: ignore[arg-type]
