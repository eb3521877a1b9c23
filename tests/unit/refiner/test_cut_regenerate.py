"""Cut and regenerate: the kept prefix is the original's segments token for token (roles
kept), only the suffix is generated again, and the refined trajectory's mask follows its
token ids; the refinement record says what happened."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from tests.unit.refiner.scripted import DOCS, Script
from tests.unit.rollout.rollout_fakes import DictRetriever, ScriptedBackend
from transformers import PreTrainedTokenizerBase

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.refiner import (
    MetaRefiner,
    cut_before,
    meta_prompt,
    rule_revise,
    split_steps,
)
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, SearchCall, Trajectory


def _mask_from_ids(traj: Trajectory) -> list[int]:
    return [int(s.role == "policy") for s in traj.segments for _ in s.token_ids]


def test_steps_and_meta_prompt(setup: tuple, tokenizer: PreTrainedTokenizerBase) -> None:
    _, _, traj = setup
    steps = split_steps(traj.segments)
    assert [s.start for s in steps] == [0, 2, 4] and [len(s.env) for s in steps] == [1, 1, 0]
    text, ids = meta_prompt(tokenizer, traj.question, steps)
    assert "between 0 and 3 where 0 means all steps are acceptable" in text
    for i in (1, 2, 3):
        assert f"ASSISTANT_STEP_{i}:" in text and f"TOOL_OUTPUT_{i}:" in text
    assert text.index("Paris is the capital") < text.index("ASSISTANT_STEP_2:")
    assert ids == tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_cut_keeps_prefix_token_exact(setup: tuple, step: int) -> None:
    _, _, traj = setup
    start = cut_before(traj, step)
    keep = split_steps(traj.segments)[step - 1].start
    assert start.segments == traj.segments[:keep]
    assert [s.token_ids for s in start.segments] == [s.token_ids for s in traj.segments[:keep]]
    assert start.prompt_ids == traj.prompt_ids and start.id == traj.id
    assert [c.turn for c in start.searches] == list(range(1, step))
    assert start.answer is None and start.stats.turns == step - 1
    assert start.stats.valid_actions == step - 1 and start.stats.invalid_actions == 0


def test_refine_regenerates_only_the_suffix(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    original = Trajectory.from_json(traj.to_json())
    calls_before = len(backend.calls)
    config = RefinerConfig(enabled=True, margin=-100.0, probe_share=0.0, random_cut_probe=False)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    outcome = refiner.refine([traj], seed=3, greedy=True)
    (final,) = outcome.final
    record = final.refinement
    assert record is not None and record.revised and record.revisions == 1
    assert original.answer == "A1" and final.answer == "A2" and record.original_answer == "A1"
    k = record.cut_step
    keep = split_steps(original.segments)[k - 1].start
    assert record.prefix_segments == keep
    assert final.segments[:keep] == original.segments[:keep]
    regenerated = [g for call in backend.calls[calls_before:] for g in call]
    suffix_policy = [s for s in final.segments[keep:] if s.role == "policy"]
    assert [s.token_ids for s in suffix_policy] == [g.token_ids for g in regenerated]
    assert 0 < outcome.read_s < outcome.refine_s  # reading, then regenerating the suffix
    assert len(suffix_policy) == 4 - k  # steps k..3 again
    assert final.loss_mask() == _mask_from_ids(final)
    assert len(final.loss_mask()) == len(final.response_ids)
    (decision,) = record.decisions
    assert decision.cut_step == k and decision.steps == 3
    assert decision.decision.role == "meta"
    assert decision.decision.token_ids == [
        *tokenizer.encode(str(k), add_special_tokens=False),
        tokenizer.eos_token_id,
    ]
    assert decision.log_odds - decision.prior == record.log_odds
    assert len(decision.answer_logprobs) == 4
    assert outcome.originals[0] is traj and outcome.trims[0] is final
    assert Trajectory.from_json(final.to_json()) == final


def test_accept_keeps_the_trajectory(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=100.0, probe_share=1.0)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    outcome = refiner.refine([traj], seed=3, greedy=False)
    (final,) = outcome.final
    assert final is traj and final.refinement is not None
    assert not final.refinement.revised and final.refinement.cut_step == 0
    assert final.refinement.decisions[0].decision.token_ids[0] == tokenizer.encode("0")[0]
    assert outcome.accepted == 1 and outcome.probed == [0]
    assert set(outcome.trims) == {0} and set(outcome.random_cuts) == {0}
    assert outcome.trims[0] is not final and len(outcome.unscored()) == 2


def test_a_first_step_trimmer_gets_no_baseline_cut_twin(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`trimmer: first` cuts where its batch-average cut does (step 1): the baseline twin
    would be the trim again, so none is regenerated (the accepted are still probed)."""
    backend, retriever, traj = setup
    for margin in (100.0, -100.0):  # accepted and probed, then revised
        config = RefinerConfig(enabled=True, margin=margin, probe_share=1.0, trimmer="first")
        refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
        outcome = refiner.refine([traj], seed=3, greedy=False)
        assert set(outcome.trims) == {0} and outcome.random_cuts == {}
    alone = RefinerConfig(enabled=True, probe_share=0.0, trimmer="first")
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), alone, 0)
    assert alone.random_cut_probe and not refiner.probes_on


def test_a_half_share_still_probes_a_lone_accepted_trajectory(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=100.0, probe_share=0.5)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    outcome = refiner.refine([traj], seed=3, greedy=False)
    assert outcome.accepted == 1 and outcome.probed == [0] and set(outcome.trims) == {0}


def test_probes_can_be_skipped(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=100.0, probe_share=1.0)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    answers = backend.script.answers
    outcome = refiner.refine([traj], seed=3, greedy=False, probe=False)
    assert not outcome.probes_ran and outcome.accepted == 1
    assert outcome.probed == [] and outcome.trims == {} and outcome.random_cuts == {}
    assert outcome.unscored() == [] and outcome.probe_s == 0.0
    assert backend.script.answers == answers  # nothing was regenerated


def test_greedy_regeneration_is_refused(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=-100.0)
    greedy = replace(RolloutConfig(), temperature=0.0)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, greedy, config, 0)
    with pytest.raises(ValueError, match="temperature"):
        refiner.refine([traj], seed=0, greedy=True)


class _Temperatures(ScriptedBackend):
    """Records each generated row's sampling temperature."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__(tokenizer, Script())
        self.temperatures: list[float] = []

    def generate(self, prompts: Any, params: Any) -> Any:
        self.temperatures.extend(p.temperature for p in params)
        return super().generate(prompts, params)


@pytest.mark.parametrize(("regen", "rollout", "drawn"), [(0.0, 0.7, 0.7), (1.5, 0.7, 1.5)])
def test_a_regeneration_is_drawn_at_regen_temperature_where_set(
    tokenizer: PreTrainedTokenizerBase,
    tiny: torch.nn.Module,
    regen: float,
    rollout: float,
    drawn: float,
) -> None:
    """0 keeps the rollout's temperature (the paper); a set one applies to the continuation
    only: the kept prefix is the original's, token for token."""
    backend = _Temperatures(tokenizer)
    retriever = DictRetriever(DOCS)
    question = Question(uid="q1", question="Who designed it?", golden_answers=("A2",))
    sampled = replace(RolloutConfig(), temperature=rollout)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [question], sampled)
    assert backend.temperatures == [rollout] * 3
    config = RefinerConfig(enabled=True, regen_temperature=regen)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, sampled, config, 0)
    (cut,) = refiner.regenerate_cuts([traj], [2], seed=3)
    assert backend.temperatures[3:] == [drawn] * 2  # step 2's search, then the answer
    kept = cut_before(traj, 2).segments
    assert cut.segments[: len(kept)] == kept and cut.answer == "A2"


def test_chat_shows_decision_cut_and_suffix(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    from rich.console import Console

    from searchrl.cli.rollout import show_refinement

    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=-100.0, probe_share=0.0, random_cut_probe=False)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    final = refiner.refine([traj], seed=3, greedy=True).final[0]
    console = Console(record=True, width=200)
    show_refinement(console, final)
    text = console.export_text()
    k = final.refinement.cut_step  # type: ignore[union-attr]
    assert f"revise, cut at step {k}" in text and "of 0..3" in text
    assert "regenerated from the cut" in text and "<answer> A2 </answer>" in text
    assert "refined answer: A2 (was A1)" in text


def test_rule_discriminator(setup: tuple) -> None:
    _, _, traj = setup
    first, second = SearchCall("Paris", ["d1"], 0), SearchCall("Eiffel", ["d2", "d1"], 1)
    traj = replace(traj, searches=[first, second])  # each search brings a new passage
    assert traj.answer is not None and not rule_revise(traj)
    assert rule_revise(replace(traj, answer=None))
    repeated = replace(second, doc_ids=["d1"])
    assert rule_revise(replace(traj, searches=[first, repeated]))
    assert rule_revise(replace(traj, searches=[replace(first, doc_ids=[]), second]))


def test_rule_discriminator_overrides_the_model(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    traj.searches = [SearchCall("Paris", ["d1"], 0), SearchCall("Eiffel", ["d2"], 1)]
    config = RefinerConfig(
        enabled=True, margin=-100.0, discriminator="rule", probe_share=0.0,
        random_cut_probe=False,
    )  # fmt: skip
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    outcome = refiner.refine([traj], seed=3, greedy=True)
    assert outcome.final[0] is traj and outcome.accepted == 1  # τ = −100 is not asked
    no_answer = replace(traj, answer=None)
    outcome = refiner.refine([no_answer], seed=3, greedy=True)
    assert outcome.final[0].refinement is not None and outcome.final[0].refinement.revised


def test_random_trimmer_is_uniform_and_seeded(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    backend, retriever, traj = setup
    config = RefinerConfig(enabled=True, margin=-100.0, trimmer="random")
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    (reading,) = refiner.read([traj])
    assert reading is not None
    cuts = [refiner.trim(traj, reading, seed, 0, greedy=True) for seed in range(300)]
    assert set(cuts) == {1, 2, 3} and min(cuts.count(k) for k in (1, 2, 3)) > 60
    assert cuts == [refiner.trim(traj, reading, seed, 0, greedy=True) for seed in range(300)]


def test_first_step_trimmer_rejects_and_resamples_the_whole_trajectory(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`trimmer: first` cuts at step 1 whatever the model reads: nothing of the rejected
    trajectory is kept, every turn is generated again, and the decision recorded (and trained
    under joint optimization) is the answer "1"."""
    backend, retriever, traj = setup
    original = Trajectory.from_json(traj.to_json())
    config = RefinerConfig(
        enabled=True, margin=-100.0, trimmer="first", probe_share=0.0, random_cut_probe=False
    )
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    (reading,) = refiner.read([traj])
    assert reading is not None and refiner.cut_distribution(reading) == [1.0, 0.0, 0.0]
    assert {refiner.trim(traj, reading, seed, 0, greedy=False) for seed in range(50)} == {1}
    calls_before = len(backend.calls)
    (final,) = refiner.refine([traj], seed=3, greedy=False).final
    record = final.refinement
    assert record is not None and record.revised and record.cut_step == 1
    assert record.prefix_segments == 0 and final.prompt_ids == original.prompt_ids
    regenerated = [g for call in backend.calls[calls_before:] for g in call]
    assert [s.token_ids for s in final.segments if s.role == "policy"] == [
        g.token_ids for g in regenerated
    ]
    assert len(regenerated) == 3 and final.answer != original.answer
    assert final.loss_mask() == _mask_from_ids(final)
    assert record.decisions[0].decision.token_ids == [
        *tokenizer.encode("1", add_special_tokens=False),
        tokenizer.eos_token_id,
    ]


def test_baseline_cut_follows_the_trimmers_average_distribution(
    setup: tuple,
    tiny: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S_trim's baseline is the trimmer's batch-average cut distribution (Σ_k E[π_h(k)]·E[G_k]),
    not a uniform cut: a trimmer that always cuts at the last step earns no skill for it."""

    from searchrl.refiner import refiner as module
    from searchrl.refiner.meta import Reading

    backend, retriever, traj = setup
    batch = [Trajectory.from_json({**traj.to_json(), "id": f"t{i}"}) for i in range(24)]
    config = RefinerConfig(enabled=True, margin=-100.0, probe_share=1.0)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    late = [math.log(p) for p in (0.1, 1e-6, 1e-6, 0.9)]  # "0", then cut at step 3

    def read(trajs):  # type: ignore[no-untyped-def]
        return [Reading("m", [1], [[k] for k in range(4)], late) for _ in trajs]

    cuts: list[int] = []
    real_cut = module.cut_before

    def spy(t: Trajectory, step: int) -> Trajectory:
        cuts.append(step)
        return real_cut(t, step)

    monkeypatch.setattr(refiner, "read", read)
    monkeypatch.setattr(module, "cut_before", spy)
    outcome = refiner.refine(batch, seed=0, greedy=False)
    assert len(outcome.random_cuts) == 24 and len(cuts) == 48  # trims, then baseline cuts
    assert set(cuts[:24]) == {3} and set(cuts[24:]) == {3}


def test_reading_picks_one_prompt_per_pass_on_a_cpu(
    setup: tuple, tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """`refiner.micro_batch_size: 0` reads one meta prompt per pass on a CPU (a padded batch
    needs the slow masked attention there); a set size is used as given."""
    from searchrl.refiner import scoring

    backend, retriever, traj = setup
    passes: list[int] = []
    original = scoring._score_micro

    def counting(model, prompts, *args):  # type: ignore[no-untyped-def]
        passes.append(len(prompts))
        return original(model, prompts, *args)

    monkeypatch.setattr(scoring, "_score_micro", counting)
    batch = [Trajectory.from_json(traj.to_json()) for _ in range(3)]
    for size, expected in ((0, [1, 1, 1]), (2, [2, 1])):
        config = RefinerConfig(enabled=True, micro_batch_size=size)
        refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
        passes.clear()
        assert all(r is not None for r in refiner.read(batch))
        assert passes == expected
