"""A regeneration that repeats the step it was cut before is drawn again (`fresh_tries`);
what counts as the same step."""

from __future__ import annotations

import pytest
import torch
from tests.unit.refiner.scripted import DOCS, Answers
from tests.unit.rollout.rollout_fakes import DictRetriever, ScriptedBackend
from transformers import PreTrainedTokenizerBase

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.refiner import MetaRefiner, cut_before
from searchrl.refiner.steps import step_action
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, Segment, Trajectory


@pytest.mark.parametrize("tries", [0, 1, 3])
def test_a_regeneration_that_repeats_the_cut_step_is_drawn_again(
    tokenizer: PreTrainedTokenizerBase, tiny: torch.nn.Module, tries: int
) -> None:
    """`fresh_tries`: cut at the answer step, the Actor answers "A1" again twice (once as
    " a1 "), then "B"; each try redraws the repeats only, the last draw is kept when the tries
    run out, and the kept prefix is the original's."""
    backend = ScriptedBackend(tokenizer, Answers(["A1", " a1 ", "A1", "B"]))
    retriever = DictRetriever(DOCS)
    question = Question(uid="q1", question="Who designed it?", golden_answers=("B",))
    (traj,) = run_rollouts(backend, tokenizer, retriever, [question], RolloutConfig())
    assert step_action(traj, 3) == "answer: a1" and step_action(traj, 2) == "search: eiffel tower"
    config = RefinerConfig(enabled=True, fresh_tries=tries)
    refiner = MetaRefiner(tiny, tokenizer, backend, retriever, RolloutConfig(), config, 0)
    calls = len(backend.calls)
    (answer_cut,) = refiner.regenerate_cuts([traj], [3], seed=5)
    assert answer_cut.answer == {0: "a1", 1: "A1", 3: "B"}[tries]
    assert len(backend.calls) - calls == 1 + min(tries, 2)  # one answer per draw
    kept = cut_before(traj, 3).segments
    assert answer_cut.segments[: len(kept)] == kept
    # a search step whose query can only repeat here is redrawn on every try, each a
    # search and an answer
    calls = len(backend.calls)
    (search_cut,) = refiner.regenerate_cuts([traj], [2], seed=5)
    assert step_action(search_cut, 2) == "search: eiffel tower"
    assert len([g for call in backend.calls[calls:] for g in call]) == 2 * (1 + tries)


def test_a_step_s_action_is_its_kind_and_content_case_and_spacing_aside() -> None:
    def seg(role: str, text: str) -> Segment:
        return Segment(role=role, text=text, token_ids=[1])

    traj = Trajectory(
        id="q#0", uid="q", question="q?", golden_answers=["Paris"], prompt="", prompt_ids=[1],
        segments=[
            seg("policy", "<think>x</think><search> Who  Founded X </search>"),
            seg("env", "<information>doc</information>"),
            seg("policy", "<answer>Paris</answer>"),
        ],
    )  # fmt: skip
    assert step_action(traj, 1) == "search: who founded x"
    assert step_action(traj, 2) == "answer: paris"
    assert step_action(traj, 3) == ""
