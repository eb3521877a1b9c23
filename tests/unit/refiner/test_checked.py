"""The checked trimmer (`refiner.trimmer: checked`): the earliest step a check of the
transcript shows wrong, read off real rollouts (real tokenizer, scripted Actor, a retriever
over real passages), and the Meta-Refiner cutting there whatever π_h reads."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tests.unit.rollout.rollout_fakes import DictRetriever, ScriptedBackend
from transformers import PreTrainedTokenizerBase

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.refiner import MetaRefiner
from searchrl.refiner.labelled import checked_accuracy
from searchrl.refiner.rule import checked_step, planned_hops
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Document, Question, Trajectory

DOCS = [
    Document("d1", '"Eiffel Tower"\nThe Eiffel Tower was designed by Gustave Eiffel.'),
    Document("d2", '"Gustave Eiffel"\nGustave Eiffel was born in Dijon.'),
    Document("d3", '"Dijon"\nDijon lies in Burgundy.'),
]
CONFIG = RolloutConfig(topk=1)
PLAN = "<think> Plan: designer, born. </think>\n"


def rollout(tokenizer: PreTrainedTokenizerBase, turns: list[str]) -> Trajectory:
    """One trajectory whose Actor writes `turns` in order (the answer turn ends it)."""
    script = iter(turns)
    backend = ScriptedBackend(tokenizer, lambda _context: next(script))
    question = Question(uid="q", question="Where was the designer of the Eiffel Tower born?",
                        golden_answers=("Dijon",))  # fmt: skip
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(DOCS), [question], CONFIG)
    return traj


SOUND = [
    PLAN + "<search> Eiffel Tower designer </search>",
    "<think> Gustave Eiffel. </think>\n<search> Gustave Eiffel born </search>",
    "<think> Dijon. </think>\n<answer> Dijon </answer>",
]


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (SOUND, 0),
        # the second search asks the first one's query again
        ([SOUND[0], PLAN + "<search> Eiffel Tower designer </search>", SOUND[2]], 2),
        # another query, but the passage it brings was already there
        ([SOUND[0], "<search> Eiffel Tower architect designed </search>", SOUND[2]], 2),
        # a search beyond the two the plan names (it brings a new passage)
        ([*SOUND[:2], "<search> Dijon Burgundy region </search>", SOUND[2]], 3),
        # an answer no passage (nor the question) holds
        ([*SOUND[:2], "<answer> Lyon </answer>"], 3),
        # an invalid action
        ([SOUND[0], "<think> hmm </think>", *SOUND[1:]], 2),
    ],
)
def test_the_earliest_step_a_check_shows_wrong(
    tokenizer: PreTrainedTokenizerBase, turns: list[str], expected: int
) -> None:
    traj = rollout(tokenizer, turns)
    assert checked_step(traj) == expected


def test_without_a_plan_a_longer_search_chain_passes(tokenizer: PreTrainedTokenizerBase) -> None:
    turns = [SOUND[0].replace(PLAN, "<think> go </think>\n"), *SOUND[1:2],
             "<search> Dijon Burgundy region </search>", SOUND[2]]  # fmt: skip
    traj = rollout(tokenizer, turns)
    assert planned_hops(traj.segments[0].text) is None and checked_step(traj) == 0
    assert planned_hops("<think> Plan: employer, headquarters, country. </think>") == 3


def refiner_of(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, **switches: Any
) -> MetaRefiner:
    """A refiner over the tiny model whose regenerations answer right (`SOUND`'s last turn)."""
    config = RefinerConfig(enabled=True, probe_share=0.0, random_cut_probe=False, **switches)
    backend = ScriptedBackend(tokenizer, lambda _context: SOUND[2])
    return MetaRefiner(tiny, tokenizer, backend, DictRetriever(DOCS), CONFIG, config, 0)


@pytest.fixture
def pair(tokenizer: PreTrainedTokenizerBase) -> tuple[Trajectory, Trajectory]:
    """A sound trajectory and one whose last answer no passage holds (checked step 3)."""
    return rollout(tokenizer, SOUND), rollout(tokenizer, [*SOUND[:2], "<answer> Lyon </answer>"])


def test_the_refiner_cuts_at_the_checked_step_whatever_pi_h_reads(
    pair: tuple[Trajectory, Trajectory],
    tiny: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    sound, wrong = pair
    refiner = refiner_of(tiny, tokenizer, margin=-100.0, trimmer="checked")
    read_sound, read_wrong = refiner.read([sound, wrong])
    assert read_sound is not None and read_wrong is not None
    assert read_wrong.checked == 3 and refiner.cut_distribution(read_wrong) == [0.0, 0.0, 1.0]
    assert {refiner.trim(wrong, read_wrong, s, 0, greedy=False) for s in range(30)} == {3}
    # no check fires on the sound one: π_h decides, as under `trimmer: model`
    paper = refiner_of(tiny, tokenizer, margin=-100.0, trimmer="model")
    (read_paper,) = paper.read([sound])
    assert read_sound.checked == 0 and read_paper is not None
    assert refiner.cut_distribution(read_sound) == pytest.approx(read_paper.trimmer())
    (final,) = refiner.refine([wrong], seed=1, greedy=True).final
    assert final.refinement is not None and final.refinement.cut_step == 3
    assert final.answer == "Dijon"  # the cut kept both searches and regenerated the answer


def test_a_confidence_refiner_reads_no_meta_prompt_where_a_check_fired(
    pair: tuple[Trajectory, Trajectory],
    tiny: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the Actor's confidence deciding, π_h is read only for a revised trajectory no
    check flags; the flagged one is cut at its checked step with no forward pass."""
    sound, wrong = pair
    for traj in pair:
        for segment in traj.segments:
            if segment.role == "policy":
                segment.logprobs = [-0.5] * len(segment.token_ids)  # unsure: both revised
    refiner = refiner_of(
        tiny, tokenizer, discriminator="confidence", confidence_threshold=0.05, trimmer="checked"
    )
    read, sizes = refiner.read, []

    def counted(trajectories: list[Trajectory]) -> list[Any]:
        sizes.append([t.id for t in trajectories])
        return read(trajectories)

    monkeypatch.setattr(refiner, "read", counted)
    outcome = refiner.refine([sound, wrong], seed=1, greedy=True)
    assert sizes == [[sound.id]]
    flagged = outcome.final[1].refinement
    assert flagged is not None and flagged.revised and flagged.cut_step == 3
    assert all(map(math.isnan, flagged.decisions[0].answer_logprobs))


def test_checked_accuracy_scores_the_checked_cut(
    pair: tuple[Trajectory, Trajectory],
    tiny: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    sound, wrong = pair
    readings = refiner_of(tiny, tokenizer).read([sound, wrong, wrong])
    found = checked_accuracy([sound, wrong, wrong], readings, [0, 3, 1])
    assert found["meta/trimmer_exact_step_checked"] == 0.5  # right on the 3, wrong on the 1
    assert found["meta/checked/fires_flawed"] == 1.0
    assert found["meta/checked/fires_clean"] == 0.0
    assert checked_accuracy([sound], readings[:1], [0]) == {}
