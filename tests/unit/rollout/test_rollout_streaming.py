"""Continuous batching across turns (`rollout.streaming`): a row's next turn goes to the engine
as soon as its own turn is done, and the trajectories are exactly those of the turn-by-turn
loop (segments, masks, searches, answers, stop reasons)."""

from __future__ import annotations

import dataclasses

from rollout_fakes import DictRetriever, ScriptedBackend, StreamingBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, Trajectory

QUESTIONS = [
    Question("q1", "What is the capital of France", ("Paris",)),
    Question("q2", "What is the capital of Germany?", ("Berlin",)),
    Question("q3", "Who designed the Eiffel Tower?", ("Gustave Eiffel",)),
]


def searches(context: str) -> str:
    """q1 answers at once; the others search one, two or more times, then answer."""
    seen = context.count("<information>Doc")
    question = context.split("Question: ")[1].split("\n")[0]
    if "France" in question:
        return "<answer> Paris </answer>"
    wanted = 1 if "Germany" in question else 9
    if seen < wanted:
        return f"<think>Step {seen}.</think>\n<search> capital {seen} </search>"
    return "<think>Enough.</think>\n<answer> Berlin </answer>"


def untimed(traj: Trajectory) -> dict:
    """The trajectory's record without its wall-clock timings."""
    row = traj.to_json()
    for key in ("generation_s", "retrieval_s"):
        row["stats"].pop(key)
    return row


def test_streaming_gives_the_trajectories_of_the_turn_by_turn_loop(tokenizer, docs) -> None:
    config = RolloutConfig(max_turns=3, force_answer=True)
    by_turn = run_rollouts(
        ScriptedBackend(tokenizer, searches),
        tokenizer,
        DictRetriever(docs),
        QUESTIONS,
        dataclasses.replace(config, streaming=False),
        n_samples=2,
    )
    backend = StreamingBackend(tokenizer, searches)
    retriever = DictRetriever(docs)
    streamed = run_rollouts(backend, tokenizer, retriever, QUESTIONS, config, n_samples=2)
    assert [untimed(t) for t in streamed] == [untimed(t) for t in by_turn]
    assert [t.stats.searches for t in streamed] == [0, 0, 1, 1, 3, 3]
    assert [t.stats.stop_reason for t in streamed] == ["answer"] * 4 + ["max_turns"] * 2
    assert backend.largest_flight == 6  # every row in flight at once
    # one retriever call per finished row: nobody waited for a turn's slowest row
    assert len(retriever.calls) == sum(t.stats.searches for t in streamed)
    for traj in streamed:
        policy = [s for s in traj.segments if s.role == "policy"]
        assert all(s.token_ids in [g.token_ids for g in backend.generated] for s in policy)


def test_streaming_is_off_for_engines_that_cannot_stream(tokenizer, docs) -> None:
    backend = ScriptedBackend(tokenizer, searches)
    retriever = DictRetriever(docs)
    run_rollouts(backend, tokenizer, retriever, QUESTIONS, RolloutConfig(max_turns=2))
    assert [len(c) for c in retriever.calls] == [2, 1]  # q2 and q3 together, then q3 alone
