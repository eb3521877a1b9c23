"""Generation overlapped with training: step t+1 is rolled out in the background while step t
updates, from exactly the prompts the synchronous trainer would draw, with the weights of one
update earlier; evaluation and unplanned rounds run at once with the current weights."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace

import pytest
import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_config, tiny_llama

from searchrl.config.errors import ConfigError
from searchrl.models.hf_backend import HFBackend
from searchrl.reward.outcome import em_reward
from searchrl.train.loop import Trainer
from searchrl.train.models import frozen_reference, prepare_policy
from searchrl.train.overlap import SharedEngine, attach, check_overlap
from searchrl.types import Question, Trajectory


class VersionedEngine:
    """A backend that holds its own copy of the weights; rollouts record which copy."""

    owns_weights = True

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.syncs = 0
        self.synced_version: int | None = None

    def sync_weights(self, source: torch.nn.Module, version: int | None = None) -> bool:
        self.weights = {k: v.detach().clone() for k, v in source.state_dict().items()}
        self.syncs += 1
        return True

    def release(self) -> None:
        """It never sleeps."""

    def generate(self, prompts, params):  # type: ignore[no-untyped-def]
        raise AssertionError("the fake rollout does not generate")


class Recorder:
    """The non-syncing rollout over a shared engine: scripted trajectories, plus a log of
    (uids, seed, greedy, the engine's weights, thread, start, end) per call."""

    def __init__(self, engine: SharedEngine, seconds: float = 0.0) -> None:
        self.engine = engine
        self.seconds = seconds
        self.calls: list[SimpleNamespace] = []

    def __call__(
        self, qs: Sequence[Question], *, n_samples: int, seed: int, greedy: bool
    ) -> list[Trajectory]:
        with self.engine.lock:
            started = time.perf_counter()
            time.sleep(self.seconds)
            weights = dict(self.engine.backend.weights)
            out = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
            self.calls.append(
                SimpleNamespace(
                    uids=[q.uid for q in qs],
                    seed=seed,
                    greedy=greedy,
                    weights=weights,
                    thread=threading.current_thread().name,
                    start=started,
                    end=time.perf_counter(),
                )
            )
            return out


def build(seconds: float = 0.0, **overrides: object):  # type: ignore[no-untyped-def]
    settings: dict[str, object] = {
        "batch_size": 2,
        "mini_batch_size": 2,
        "overlap": {"enabled": True},
        "algo": {"behaviour_correction": "auto"},
    }
    config = tiny_config(**{**settings, **overrides})
    policy = prepare_policy(tiny_llama(), config.policy)
    engine = SharedEngine(VersionedEngine())
    recorder = Recorder(engine, seconds)
    trainer = Trainer(config, policy, None, frozen_reference(policy, False), 0, recorder,
                      em_reward, questions(8))  # fmt: skip
    overlapped = attach(trainer, engine, recorder, policy)
    return trainer, overlapped, recorder


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def synchronous_prompts(count: int, **overrides: object) -> list[tuple[list[str], int]]:
    """(uids, seed) of every rollout call of the same config without overlap."""
    config = tiny_config(batch_size=2, mini_batch_size=2, **overrides)
    calls: list[tuple[list[str], int]] = []

    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        calls.append(([q.uid for q in qs], seed))
        return scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)

    policy = prepare_policy(tiny_llama(), config.policy)
    trainer = Trainer(config, policy, None, frozen_reference(policy, False), 0, rollout,
                      em_reward, questions(8))  # fmt: skip
    for _ in range(count):
        trainer.step()
    return calls


def test_each_step_trains_on_rollouts_of_the_weights_one_update_earlier() -> None:
    trainer, overlapped, recorder = build(steps=4)
    versions = [snapshot(trainer.policy)]
    staleness = []
    for _ in range(4):
        metrics, _ = trainer.step()
        metrics.update(overlapped.metrics())
        staleness.append((metrics["overlap/ahead"], metrics["overlap/staleness"]))
        versions.append(snapshot(trainer.policy))
    overlapped.close()
    assert len(recorder.calls) == 4  # nothing planned past the last step
    assert same(recorder.calls[0].weights, versions[0])  # step 0: synchronous, w0
    for step in range(1, 4):  # step t: sampled by w_{t-1} while w_{t-1} → w_t was computed
        assert same(recorder.calls[step].weights, versions[step - 1])
        assert not same(recorder.calls[step].weights, versions[step])
        assert recorder.calls[step].thread.startswith("rollout-ahead")
    assert staleness == [(0.0, 0.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0)]
    assert trainer.correct_behaviour  # stale samples are reweighted, whatever the engine


def test_planned_prompts_and_seeds_are_the_synchronous_ones_with_dynamic_sampling() -> None:
    """Extra sampling rounds draw more prompts: the plan is made after the last round, so
    it still matches what the trainer asks for next."""
    overrides = {"algo": {"dynamic_sampling": True, "max_sampling_rounds": 3}, "steps": 4}
    expected = synchronous_prompts(4, **overrides)
    trainer, overlapped, recorder = build(
        algo={"behaviour_correction": "auto", "dynamic_sampling": True, "max_sampling_rounds": 3},
        steps=4,
    )
    for _ in range(4):
        trainer.step()
    overlapped.close()
    assert [(c.uids, c.seed) for c in recorder.calls] == expected
    assert len(expected) > 4  # some step did take an extra round


def test_the_next_rollout_runs_while_the_update_does() -> None:
    trainer, overlapped, recorder = build(seconds=0.3, steps=2)
    update_ends = []
    original = trainer._update_policy

    def timed(exp):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        stats = original(exp)
        time.sleep(0.3)  # an update as long as a rollout
        update_ends.append((started, time.perf_counter()))
        return stats

    trainer._update_policy = timed  # type: ignore[method-assign]
    trainer.step()
    trainer.step()
    overlapped.close()
    planned = recorder.calls[1]
    assert planned.thread.startswith("rollout-ahead")
    assert recorder.calls[0].end <= planned.start  # after step 0's own rollout …
    assert planned.start < update_ends[0][1]  # … and before step 0's update was done


def test_evaluation_between_steps_uses_the_current_weights() -> None:
    trainer, overlapped, recorder = build(seconds=0.1, steps=3)
    trainer.step()
    current = snapshot(trainer.policy)
    trainer.evaluate(questions(2))
    trainer.step()
    overlapped.close()
    evaluation = next(c for c in recorder.calls if c.greedy)
    assert same(evaluation.weights, current) and evaluation.thread == "MainThread"
    assert len([c for c in recorder.calls if not c.greedy]) == 3  # the plan survived it


def test_overlap_needs_the_correction_and_an_engine_with_its_own_weights() -> None:
    config = tiny_config(overlap={"enabled": True}, algo={"behaviour_correction": "off"})
    with pytest.raises(ConfigError, match="behaviour_correction"):
        check_overlap(config, VersionedEngine())  # type: ignore[arg-type]
    policy = tiny_llama()
    tokenizer = SimpleNamespace(eos_token_id=1, pad_token_id=0, decode=lambda ids, **_: "")
    sharing = HFBackend(policy, tokenizer, max_batch_size=2)
    config = tiny_config(overlap={"enabled": True})
    with pytest.raises(ConfigError, match="policy module itself"):
        check_overlap(config, sharing)
    copying = HFBackend(policy, tokenizer, max_batch_size=2, generation_dtype=torch.bfloat16)
    check_overlap(config, copying)


class LoadedWeights:
    """`vllm.LLM` as far as a sync goes: it keeps the weights the last reload handed it."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}

    def collective_rpc(self, method: str, kwargs: dict[str, object]) -> list[None]:
        assert method == "reload_weights"
        self.weights = {k: v.clone() for k, v in kwargs["weights_iterator"]}  # type: ignore[attr-defined]
        return [None]

    def reset_prefix_cache(self) -> None:
        pass


def test_two_steps_ahead_on_the_vllm_backend_syncs_the_kept_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 6: with `max_staleness >= 2` a planned rollout syncs a `WeightSnapshot` (the
    weights of a version the engine does not hold yet), and the vLLM backend's sync read a
    fingerprint from it with `.parameters()`: AttributeError at the second step. A snapshot
    now always loads, and the engine samples each step with the weights it was planned on."""
    from searchrl.models import vllm_backend
    from searchrl.models.vllm_backend import VLLMBackend

    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    llm = LoadedWeights()
    vllm = VLLMBackend(llm, None, torch.float32)
    vllm.head_untied = True
    engine = SharedEngine(vllm)
    config = tiny_config(
        batch_size=2, mini_batch_size=2, steps=4, overlap={"enabled": True, "max_staleness": 2},
        algo={"behaviour_correction": "auto"},
    )  # fmt: skip
    policy = prepare_policy(tiny_llama(), config.policy)
    sampled: list[dict[str, torch.Tensor]] = []

    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        with engine.lock:
            sampled.append(dict(llm.weights))
        return scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)

    trainer = Trainer(config, policy, None, frozen_reference(policy, False), 0, rollout,
                      em_reward, questions(8))  # fmt: skip
    overlapped = attach(trainer, engine, rollout, policy)
    versions = [snapshot(policy)]
    staleness = []
    for _ in range(4):
        trainer.step()
        staleness.append(overlapped.metrics()["overlap/staleness"])
        versions.append(snapshot(policy))
    overlapped.close()
    vllm._closed = True
    assert max(staleness) == 2.0
    assert same(sampled[0], versions[0])
    assert all(any(same(s, v) for v in versions[:-1]) for s in sampled)  # whole versions only
