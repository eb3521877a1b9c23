"""`rollout.force_answer`: the final round's reasoning is closed, the engine opens the answer
(an env segment) and the policy completes it; off, the paper's rule is unchanged."""

from __future__ import annotations

import dataclasses

from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import FORCED_ANSWER, THINK_CLOSE
from searchrl.reward.format import is_valid_sequence
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question

FRANCE = Question("q1", "What is the capital of France", ("Paris",))
FORCED = dataclasses.replace(RolloutConfig(), max_turns=2, force_answer=True)


def keeps_searching(context: str) -> str:
    """Searches every turn; completes a forced answer when the context ends with one."""
    if context.endswith(FORCED_ANSWER):
        return " Paris </answer> and more"
    return "<think> I still need more. </think>\n<search> France </search>"


def test_final_round_is_stopped_at_think_and_the_answer_is_completed(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    backend = ScriptedBackend(tokenizer, keeps_searching)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], FORCED, seed=1)
    roles = [s.role for s in traj.segments]
    assert roles == ["policy", "env", "policy", "env", "policy", "env", "policy"]
    final_think, forced, completion = traj.segments[-3:]
    assert final_think.text.rstrip().endswith(THINK_CLOSE)
    assert "<search>" not in final_think.text  # stopped before the unexecuted search
    assert forced.text == FORCED_ANSWER
    assert forced.token_ids == tokenizer.encode(FORCED_ANSWER, add_special_tokens=False)
    assert completion.text.startswith(" Paris </answer>")
    assert traj.answer == "Paris" and traj.metrics["em"] == 1.0
    assert traj.stats.stop_reason == "answer" and traj.stats.searches == len(retriever.calls) == 2
    assert traj.stats.turns == 3 and traj.stats.invalid_actions == 0
    # the forced env tokens are never trained on, the completion is
    mask = traj.loss_mask()
    start = len(traj.response_ids) - len(completion.token_ids) - len(forced.token_ids)
    assert mask[start : start + len(forced.token_ids)] == [0] * len(forced.token_ids)
    assert mask[-len(completion.token_ids) :] == [1] * len(completion.token_ids)
    # the final round was sampled with </think> as a stop string, the completion with </answer>
    final_params = backend.generated[-2]
    assert final_params.stop_string == THINK_CLOSE
    assert is_valid_sequence(traj.response_text.replace(" and more", ""))


def test_an_answer_in_the_final_round_needs_no_forcing(tokenizer, docs) -> None:
    def answers_at_the_end(context: str) -> str:
        if context.count("<information>") >= 2:
            return "<think> done </think>\n<answer> Paris </answer>"
        return keeps_searching(context)

    backend = ScriptedBackend(tokenizer, answers_at_the_end)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], FORCED)
    assert FORCED_ANSWER not in [s.text for s in traj.segments]
    assert traj.answer == "Paris" and traj.stats.stop_reason == "answer"


def test_a_completion_without_a_closing_tag_is_cut_at_the_answer_cap(tokenizer, docs) -> None:
    def rambles(context: str) -> str:
        if context.endswith(FORCED_ANSWER):
            return " Paris I think\nor maybe Lyon" + " I do not know" * 50
        return keeps_searching(context)

    config = dataclasses.replace(FORCED, max_response_tokens=30, answer_tokens=12)
    backend = ScriptedBackend(tokenizer, rambles)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    assert len(traj.segments[-1].token_ids) == 12  # the completion stopped at the cap
    assert traj.answer == "Paris I think" and traj.stats.stop_reason == "answer_cap"
    assert traj.metrics["subem"] == 1.0


def test_an_empty_completion_ends_unanswered(tokenizer, docs) -> None:
    def silent(context: str) -> str:
        return "\n</answer>" if context.endswith(FORCED_ANSWER) else keeps_searching(context)

    backend = ScriptedBackend(tokenizer, silent)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], FORCED)
    assert traj.answer == "" or traj.answer is None
    silent_cap = dataclasses.replace(FORCED, answer_tokens=1)
    backend = ScriptedBackend(tokenizer, lambda c: "\n" * 5 if c.endswith(FORCED_ANSWER)
                              else keeps_searching(c))  # fmt: skip
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], silent_cap)
    assert traj.answer is None and traj.stats.stop_reason == "max_turns"


def test_a_runaway_final_thought_is_closed_at_its_cap_and_answered(tokenizer, docs) -> None:
    """The 730-1,040-token rows of issue 64: a final round that never closes its thought."""

    def runs_away(context: str) -> str:
        if context.endswith(THINK_CLOSE + FORCED_ANSWER):
            return " Paris </answer>"
        if context.count("Doc 1(Title") >= 2:
            return "<think> Let me think about this" + " and this" * 400
        return keeps_searching(context)

    config = dataclasses.replace(FORCED, max_response_tokens=40)
    backend = ScriptedBackend(tokenizer, runs_away)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    runaway, forced, completion = traj.segments[-3:]
    assert completion.text == " Paris </answer>"
    assert len(runaway.token_ids) == 40 and THINK_CLOSE not in runaway.text
    assert forced.role == "env" and forced.text == THINK_CLOSE + FORCED_ANSWER
    assert traj.answer == "Paris" and traj.stats.stop_reason == "answer"
    assert is_valid_sequence(traj.response_text)


def test_a_search_in_the_final_round_is_not_run_and_the_answer_is_forced(tokenizer, docs) -> None:
    def searches_then_answers(context: str) -> str:
        if context.endswith(FORCED_ANSWER):
            return " Paris </answer>"
        return "<search> France </search>"  # no thought at all

    retriever = DictRetriever(docs)
    backend = ScriptedBackend(tokenizer, searches_then_answers)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], FORCED)
    assert traj.stats.searches == len(retriever.calls) == 2  # the third search never ran
    assert traj.segments[-2].text == FORCED_ANSWER and traj.segments[-3].text.endswith("</search>")
    assert traj.answer == "Paris" and traj.stats.stop_reason == "answer"


def test_a_row_out_of_room_is_forced_while_the_answer_fits(tokenizer, docs) -> None:
    def answers_when_forced(context: str) -> str:
        return " Paris </answer>" if context.endswith(FORCED_ANSWER) else keeps_searching(context)

    (probe,) = run_rollouts(
        ScriptedBackend(tokenizer, answers_when_forced), tokenizer, DictRetriever(docs),
        [FRANCE], dataclasses.replace(FORCED, max_turns=0),
    )  # fmt: skip
    # room for the prompt, one turn and half an observation: the observation does not fit
    total = len(probe.prompt_ids) + 20 + 40 + FORCED.answer_tokens
    config = dataclasses.replace(FORCED, max_turns=4, max_total_tokens=total)
    backend = ScriptedBackend(tokenizer, answers_when_forced)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    assert traj.answer == "Paris" and traj.stats.stop_reason == "answer"
    assert [s.role for s in traj.segments] == ["policy", "env", "env", "policy"]
    assert traj.segments[1].text.startswith("\n\n<information>")  # no room left after it
    assert traj.segments[2].text == FORCED_ANSWER and traj.stats.searches == 1
    assert len(traj.prompt_ids) + len(traj.response_ids) <= total


def test_off_keeps_the_paper_rule(tokenizer, docs) -> None:
    config = dataclasses.replace(FORCED, force_answer=False)
    backend = ScriptedBackend(tokenizer, keeps_searching)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    assert traj.answer is None and traj.stats.stop_reason == "max_turns"
    assert FORCED_ANSWER not in [s.text for s in traj.segments]
    assert traj.segments[-1].text.endswith("</search>")
