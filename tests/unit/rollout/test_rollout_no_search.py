"""The R1 switch (`rollout.search=false`): no search instructions in the prompt, `</search>`
does not end a turn, nothing is retrieved, one turn per trajectory."""

from __future__ import annotations

import dataclasses

from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import r1_prompt, search_r1_prompt
from searchrl.rollout.loop import run_rollouts
from searchrl.rollout.parse import Action, parse_action
from searchrl.types import Question

FRANCE = Question("q1", "What is the capital of France", ("Paris",))
NO_SEARCH = dataclasses.replace(RolloutConfig(), search=False, use_chat_template=False)


def searches_then_answers(context: str) -> str:
    return (
        "<think>Let me look.</think><search> capital of France </search> <answer> Paris </answer>"
    )


def test_search_off_never_retrieves_and_ends_after_one_turn(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, searches_then_answers)
    retriever = DictRetriever(docs)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], NO_SEARCH, seed=0)
    assert traj.prompt == r1_prompt(FRANCE.question)
    assert "<search>" not in traj.prompt
    assert retriever.calls == []
    assert [s.role for s in traj.segments] == ["policy"]
    # `</search>` did not stop the turn: the answer written after it is part of it
    assert traj.segments[0].text.endswith("</answer>")
    assert traj.answer == "Paris" and traj.metrics["em"] == 1.0
    assert traj.stats.searches == 0 and traj.stats.turns == 1
    assert backend.calls and len(backend.calls) == 1


def test_search_off_without_an_answer_stops_instead_of_asking_again(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, lambda _: "<think>I am not sure.</think> no idea")
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], NO_SEARCH, seed=0)
    assert [s.role for s in traj.segments] == ["policy"]
    assert traj.answer is None and traj.stats.stop_reason == "no_answer"
    assert traj.stats.invalid_actions == 1


def test_search_on_keeps_the_search_r1_prompt_and_searches(tokenizer, docs) -> None:
    config = dataclasses.replace(NO_SEARCH, search=True)
    backend = ScriptedBackend(tokenizer, searches_then_answers)
    retriever = DictRetriever(docs)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], config, seed=0)
    assert traj.prompt == search_r1_prompt(FRANCE.question)
    assert retriever.calls[0] == ["capital of France"]
    assert traj.segments[0].text.endswith("</search>")


def test_without_search_only_an_answer_block_is_an_action() -> None:
    text = "<think>x</think><search> q </search> then <answer> Paris </answer>"
    assert parse_action(text) == Action("search", "q")
    assert parse_action(text, search=False) == Action("answer", "Paris")
    assert parse_action("<search> q </search>", search=False) == Action("invalid")
