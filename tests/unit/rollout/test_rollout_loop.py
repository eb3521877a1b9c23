"""The rollout state machine: masks, stop rules, budgets, truncation and failures."""

from __future__ import annotations

import dataclasses

import pytest
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import (
    INFORMATION_CLOSE,
    INVALID_ACTION_FEEDBACK,
    format_information,
    search_r1_prompt,
)
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, Trajectory

FRANCE = Question("q1", "What is the capital of France", ("Paris",))
GERMANY = Question("q2", "What is the capital of Germany?", ("Berlin",))
EIFFEL = Question("q3", "Who designed the Eiffel Tower?", ("Gustave Eiffel",))
CONFIG = RolloutConfig()


def search_then_answer(context: str) -> str:
    """Search once with the question, then answer with the first retrieved title."""
    if "Doc 1(Title:" not in context:
        question = context.split("Question: ")[-1].split("?")[0]
        return f"<think>I need to look this up.</think>\n<search> {question} </search> extra"
    title = context.split("Doc 1(Title: ")[-1].split(")")[0].strip('"')
    return f"<think>Found it.</think>\n<answer> {title} </answer> trailing words"


def assert_mask_matches(traj: Trajectory, tokenizer, generated: list) -> None:
    """Each masked span decodes to its text; policy spans are exactly what was generated."""
    assert len(traj.loss_mask()) == len(traj.response_ids)
    for segment in traj.segments:
        assert tokenizer.decode(segment.token_ids) == segment.text
    policy = [s for s in traj.segments if s.role == "policy"]
    generated_ids = [g.token_ids for g in generated]
    for segment in policy:
        assert segment.token_ids in generated_ids
    mask, position = traj.loss_mask(), 0
    for segment in traj.segments:
        span = mask[position : position + len(segment.token_ids)]
        assert span == [int(segment.role == "policy")] * len(segment.token_ids)
        position += len(segment.token_ids)


def test_search_then_answer_builds_the_documented_trajectory(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, search_then_answer)
    retriever = DictRetriever(docs)
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], CONFIG, seed=3)
    assert [s.role for s in traj.segments] == ["policy", "env", "policy"]
    first, info, last = traj.segments
    assert first.text.endswith("<search> What is the capital of France </search>")
    hits = retriever.search(["What is the capital of France"], 3)[0]
    assert info.text == format_information([h.document.contents for h in hits])
    assert info.token_ids == tokenizer.encode(info.text, add_special_tokens=False)
    assert last.text.endswith("</answer>")
    assert traj.answer == "Paris" and traj.metrics == {"em": 1.0, "f1": 1.0, "subem": 1.0}
    assert [c.query for c in traj.searches] == ["What is the capital of France"]
    assert traj.searches[0].doc_ids == [h.document.id for h in hits]
    stats = traj.stats
    assert (stats.turns, stats.searches, stats.valid_actions, stats.invalid_actions) == (2, 1, 2, 0)
    assert stats.stop_reason == "answer" and not stats.truncated and stats.failed is None
    assert stats.policy_tokens == len(first.token_ids) + len(last.token_ids)
    assert traj.id == "q1#0" and traj.uid == "q1" and traj.sample == 0
    assert_mask_matches(traj, tokenizer, backend.generated)


def test_all_queries_of_a_turn_go_in_one_retriever_call(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    trajs = run_rollouts(
        ScriptedBackend(tokenizer, search_then_answer),
        tokenizer,
        retriever,
        [FRANCE, GERMANY, EIFFEL],
        CONFIG,
        n_samples=2,
    )
    assert len(retriever.calls) == 1 and len(retriever.calls[0]) == 6
    assert [t.id for t in trajs] == ["q1#0", "q1#1", "q2#0", "q2#1", "q3#0", "q3#1"]
    assert [t.answer for t in trajs] == ["Paris", "Paris", "Berlin", "Berlin"] + [
        "Eiffel Tower"
    ] * 2


def test_invalid_action_gets_the_feedback_as_env_and_never_counts_as_answer(
    tokenizer, docs
) -> None:
    def confused_then_answers(context: str) -> str:
        return "Paris, I think." if "Let me try again" not in context else "<answer>Paris</answer>"

    backend = ScriptedBackend(tokenizer, confused_then_answers)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], CONFIG)
    assert [s.role for s in traj.segments] == ["policy", "env", "policy"]
    assert traj.segments[1].text == INVALID_ACTION_FEEDBACK
    assert traj.stats.invalid_actions == 1 and traj.answer == "Paris"
    assert_mask_matches(traj, tokenizer, backend.generated)

    never = ScriptedBackend(tokenizer, lambda context: "No idea.")
    (lost,) = run_rollouts(never, tokenizer, DictRetriever(docs), [FRANCE], CONFIG)
    assert INVALID_ACTION_FEEDBACK in lost.response_text  # contains "<answer> and </answer>"
    assert lost.answer is None and lost.metrics["em"] == 0.0
    assert lost.stats.invalid_actions == CONFIG.max_turns + 1


def test_an_answer_split_across_turns_never_counts(tokenizer, docs) -> None:
    """`<answer> Par` … invalid-action feedback … `is </answer>` joined would read "Paris";
    only a complete `<answer>…</answer>` action of one turn is an answer."""

    def split_answer(context: str) -> str:
        return "<answer> Par" if "Let me try again" not in context else "is </answer>"

    backend = ScriptedBackend(tokenizer, split_answer)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], CONFIG)
    assert traj.stats.valid_actions == 0
    assert traj.answer is None and traj.metrics["em"] == 0.0


def test_search_budget_then_one_final_turn_whose_search_is_not_executed(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    backend = ScriptedBackend(tokenizer, lambda context: "<search> France </search>")
    (traj,) = run_rollouts(backend, tokenizer, retriever, [FRANCE], CONFIG)
    roles = [s.role for s in traj.segments]
    assert roles == ["policy", "env"] * CONFIG.max_turns + ["policy"]
    assert traj.stats.searches == len(retriever.calls) == CONFIG.max_turns
    assert traj.stats.turns == CONFIG.max_turns + 1
    assert traj.stats.stop_reason == "max_turns" and traj.answer is None
    assert [c.turn for c in traj.searches] == [1, 2, 3, 4]


def test_observation_is_cut_to_its_budget_keeping_the_closing_tag(tokenizer, docs) -> None:
    config = dataclasses.replace(CONFIG, max_obs_tokens=25)
    backend = ScriptedBackend(tokenizer, search_then_answer)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    info = traj.segments[1]
    assert info.role == "env" and len(info.token_ids) == 25
    assert info.text.startswith("\n\n<information>") and info.text.endswith(INFORMATION_CLOSE)
    assert traj.stats.info_truncated == 1
    assert_mask_matches(traj, tokenizer, backend.generated)


def test_total_cap_stops_growth_without_cutting_the_prompt(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, search_then_answer)
    (free,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], CONFIG)
    cap = len(free.prompt_ids) + len(free.segments[0].token_ids) + 10
    config = dataclasses.replace(CONFIG, max_total_tokens=cap)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    assert traj.prompt_ids == free.prompt_ids
    assert len(traj.prompt_ids) + len(traj.response_ids) <= cap
    assert traj.stats.truncated and traj.stats.stop_reason == "length"
    assert [s.role for s in traj.segments] == ["policy"]  # the observation did not fit

    short = dataclasses.replace(CONFIG, max_total_tokens=len(free.prompt_ids) + 5)
    (cut,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], short)
    assert len(cut.response_ids) == 5 and cut.stats.stop_reason == "length"


def test_retriever_failure_fails_the_searching_rows_and_the_batch_goes_on(tokenizer, docs) -> None:
    def answers_germany_directly(context: str) -> str:
        if "Germany" in context:
            return "<answer> Berlin </answer>"
        return search_then_answer(context)

    backend = ScriptedBackend(tokenizer, answers_germany_directly)
    retriever = DictRetriever(docs, fail=True)
    failed, fine = run_rollouts(backend, tokenizer, retriever, [FRANCE, GERMANY], CONFIG)
    assert failed.stats.failed == "retrieval: server down after 3 retries"
    assert failed.stats.stop_reason == "failed" and failed.searches == []
    assert [s.role for s in failed.segments] == ["policy"]
    assert fine.stats.failed is None and fine.answer == "Berlin"


def test_chat_template_switch(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, lambda context: "<answer> Paris </answer>")
    plain_config = dataclasses.replace(CONFIG, use_chat_template=False)
    (plain,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], plain_config)
    (chat,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], CONFIG)
    assert plain.prompt == search_r1_prompt(FRANCE.question)
    assert (
        chat.prompt.startswith("<|im_start|>") and search_r1_prompt(FRANCE.question) in chat.prompt
    )
    assert tokenizer.decode(chat.prompt_ids) == chat.prompt


class _SlowBackend(ScriptedBackend):
    """Each batched call takes a known wall time, whatever its size."""

    seconds = 0.05

    def generate(self, prompts, params):  # type: ignore[no-untyped-def]
        import time

        time.sleep(self.seconds)
        return super().generate(prompts, params)


def test_generation_time_is_shared_by_tokens_so_it_sums_to_the_wall_time(tokenizer, docs) -> None:
    """`stats.generation_s` summed over trajectories is the time spent generating, not the
    batch's wall time counted once per row: Σ tokens / Σ seconds is the batch throughput."""

    def script(context: str) -> str:
        return "<answer> Paris </answer>" if "Doc 1(Title:" in context else "<search> q </search>"

    backend = _SlowBackend(tokenizer, script)
    questions = [Question(f"q{i}", f"Question {i}?", ("Paris",)) for i in range(4)]
    trajs = run_rollouts(backend, tokenizer, DictRetriever(docs), questions, RolloutConfig())
    total = sum(t.stats.generation_s for t in trajs)
    calls = len(backend.calls)
    assert calls == 2
    assert calls * _SlowBackend.seconds <= total < calls * _SlowBackend.seconds + 0.5
    rates = [t.stats.policy_tokens / t.stats.generation_s for t in trajs]
    assert max(rates) == pytest.approx(min(rates), rel=0.05)  # one call rate for everybody
    for traj in trajs:
        for segment in traj.segments:
            assert (segment.logprobs is not None) == (segment.role == "policy")
