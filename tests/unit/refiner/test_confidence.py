"""The Actor's own confidence as discriminator (`discriminator: confidence`), its threshold,
and the surprisal tilt of the trimmer's reading."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.refiner import MetaRefiner, refiner_metrics
from searchrl.refiner.confidence import step_surprisal, surprisal, threshold_for_share
from searchrl.types import Trajectory


def _with_logprobs(traj: Trajectory, logprob: float | None) -> Trajectory:
    """A copy whose Actor tokens were each sampled at `logprob` (None: none recorded); the
    retrieved passages carry none, as in a rollout."""
    copy = Trajectory.from_json(traj.to_json())
    for segment in copy.segments:
        if segment.role == "policy":
            segment.logprobs = None if logprob is None else [logprob] * len(segment.token_ids)
    return copy


def test_confidence_discriminator_revises_what_the_actor_was_unsure_of(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`discriminator: confidence` decides on the Actor's own surprisal over its tokens (the
    passages' tokens never count), ln(surprisal / threshold) against τ, whatever the meta
    prompt reads; that score is what the record keeps; no log-probabilities: accepted."""
    backend, retriever, traj = setup
    config = RefinerConfig(
        enabled=True, discriminator="confidence", confidence_threshold=0.05, probe_share=0.0,
        random_cut_probe=False,
    )  # fmt: skip
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    sure, unsure, unknown = (_with_logprobs(traj, v) for v in (-0.01, -0.5, None))
    assert surprisal(unsure) == pytest.approx(0.5) and surprisal(unknown) is None
    outcome = refiner.refine([sure, unsure, unknown], seed=3, greedy=True)
    records = [t.refinement for t in outcome.final]
    assert [r.revised for r in records if r is not None] == [False, True, False]
    assert outcome.accepted == 2
    assert records[0] is not None and records[0].log_odds == pytest.approx(math.log(0.01 / 0.05))
    assert records[1] is not None and records[1].log_odds == pytest.approx(math.log(0.5 / 0.05))
    assert records[2] is not None and records[2].log_odds == -math.inf
    mean = refiner_metrics([outcome])["refiner/log_odds_mean"]  # the unscorable one left out
    assert mean == pytest.approx((math.log(0.01 / 0.05) + math.log(0.5 / 0.05)) / 2)
    strict = replace(config, margin=math.log(20.0))  # τ = ln 20: threshold 1 nat a token
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), strict, 0)
    assert refiner.refine([_with_logprobs(traj, -0.5)], seed=3, greedy=True).accepted == 1


def test_the_confidence_discriminator_reads_only_what_the_trimmer_cuts(
    setup: tuple,
    tiny: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the Actor's confidence deciding and no decision trained, the meta prompt is read
    for the trajectories the trimmer cuts only (a trimmer that does not read reads none); the
    accepted still record a decision (T, NaN log-probs), so V_inter counts them. Probes or
    joint optimization read every trajectory, as before."""
    backend, retriever, traj = setup
    config = RefinerConfig(
        enabled=True, discriminator="confidence", confidence_threshold=0.05, probe_share=0.0,
        random_cut_probe=False,
    )  # fmt: skip

    def refine(cfg: RefinerConfig) -> tuple[list[int], Any]:
        refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), cfg, 0)
        sizes: list[int] = []
        read = refiner.read

        def counted(trajectories: list[Trajectory]) -> list[Any]:
            sizes.append(len(trajectories))
            return read(trajectories)

        monkeypatch.setattr(refiner, "read", counted)
        batch = [_with_logprobs(traj, v) for v in (-0.01, -0.5, -0.02)]
        return sizes, refiner.refine(batch, seed=3, greedy=True)

    sizes, outcome = refine(config)
    assert sizes == [1]
    records = [t.refinement for t in outcome.final]
    assert [r.revised for r in records if r is not None] == [False, True, False]
    assert records[0] is not None and records[1] is not None
    accepted, cut = records[0].decisions[0], records[1].decisions[0]
    assert accepted.cut_step == 0 and accepted.prompt_ids == [] and accepted.steps == 3
    assert len(accepted.answer_logprobs) == 4 and all(map(math.isnan, accepted.answer_logprobs))
    assert cut.prompt_ids and all(map(math.isfinite, cut.answer_logprobs))
    assert records[0].log_odds == pytest.approx(math.log(0.01 / 0.05))
    assert refiner_metrics([outcome])["refiner/v_inter"] == pytest.approx(1 / 3)
    sizes, outcome = refine(replace(config, trimmer="first"))
    assert sizes == [0] and [t.refinement.cut_step for t in outcome.final] == [0, 1, 0]  # type: ignore[union-attr]
    for everything in (replace(config, joint=True), replace(config, probe_share=0.5)):
        assert refine(everything)[0][0] == 3


def test_threshold_for_share_revises_that_share() -> None:
    values = [0.01, 0.02, 0.03, 0.04, 0.30, 0.50, 0.02, 0.01]
    threshold = threshold_for_share(values, 0.25)
    assert sum(v > threshold for v in values) == 2 and threshold == 0.04
    assert sum(v > threshold_for_share(values, 0.5) for v in values) == 4
    assert math.isnan(threshold_for_share([], 0.5))


def test_trim_surprisal_tilts_the_reading_by_each_step_s_least_expected_token(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`trim_surprisal` = β: a reading's tilt is β · ln(max −log π) of each step's Actor
    tokens (one hesitant token marks the step, however many sure ones surround it); β = 0 or
    a step without log-probabilities leaves the paper's π_h."""
    backend, retriever, traj = setup
    sampled = _with_logprobs(traj, -0.01)
    second = [s for s in sampled.segments if s.role == "policy"][1]
    assert second.logprobs is not None
    second.logprobs[3] = -2.0
    assert step_surprisal(sampled) == pytest.approx([0.01, 2.0, 0.01])
    config = RefinerConfig(enabled=True, trim_surprisal=0.5)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    (reading,) = refiner.read([sampled])
    assert reading is not None
    assert reading.tilt == pytest.approx(tuple(0.5 * math.log(v) for v in (0.01, 2.0, 0.01)))
    paper = replace(reading, tilt=()).trimmer()
    weights = [p * v**0.5 for p, v in zip(paper, (0.01, 2.0, 0.01), strict=True)]
    assert reading.trimmer() == pytest.approx([w / sum(weights) for w in weights])
    plain = replace(config, trim_surprisal=0.0)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), plain, 0)
    assert refiner.read([sampled])[0].tilt == ()  # type: ignore[union-attr]
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    assert refiner.read([_with_logprobs(traj, None)])[0].tilt == ()  # type: ignore[union-attr]
