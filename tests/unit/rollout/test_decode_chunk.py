"""`rollout.decode_chunk`: a long turn decoded over several calls is the turn one call would
have returned (text, stop string, search), also when a stop string straddles two calls."""

from __future__ import annotations

import dataclasses

from rollout_fakes import DictRetriever, ScriptedBackend, StreamingBackend

from searchrl.config.rollout import RolloutConfig
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question

FRANCE = Question("q1", "What is the capital of France", ("Paris",))
LONG = "<think>" + " word" * 70 + " </think>\n<search> France capital </search>"
ANSWER = "<think> Doc 1 says Paris. </think>\n<answer> Paris </answer>"


def continuing(context: str) -> str:
    """Writes LONG, then ANSWER after the passages, continuing whatever part of the turn the
    context already holds (the scripted model resumes mid-turn)."""
    starts = [context.rfind(m) + len(m) for m in ("assistant\n", "</information>\n\n")]
    done = context[max(starts) :]
    turn = ANSWER if "</information>" in context[-2000:] and "Doc 1(" in context else LONG
    assert turn.startswith(done), (done, turn)
    return turn[len(done) :]


def _roll(tokenizer, docs, chunk: int):
    config = dataclasses.replace(RolloutConfig(), max_turns=1, decode_chunk=chunk, temperature=0)
    backend = ScriptedBackend(tokenizer, continuing)
    (traj,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    return traj, backend


def test_a_chunked_turn_is_the_turn_one_call_gives(tokenizer, docs) -> None:
    whole, one = _roll(tokenizer, docs, 0)
    ids = tokenizer.encode(LONG, add_special_tokens=False)
    # a chunk size whose boundary cuts "</search>" in two: neither call sees it whole
    split = next(
        k for k in range(len(ids), 0, -1)
        if "</sea" in tokenizer.decode(ids[:k]) and "</search>" not in tokenizer.decode(ids[:k])
    )  # fmt: skip
    for chunk in (16, split):
        chunked, backend = _roll(tokenizer, docs, chunk)
        assert [s.text for s in chunked.segments] == [s.text for s in whole.segments]
        assert chunked.searches[0].query == "France capital" and chunked.answer == "Paris"
        assert chunked.stats.stop_reason == whole.stats.stop_reason == "answer"
        assert chunked.stats.turns == whole.stats.turns == 2
        assert len(backend.calls) > len(one.calls)  # the first turn took several calls
        first_turn = chunked.segments[0]
        assert tokenizer.decode(first_turn.token_ids) == first_turn.text
        assert len(first_turn.token_ids) == len(first_turn.logprobs or [])


def test_a_chunked_turn_streams_as_the_turn_one_call_gives(tokenizer, docs) -> None:
    """Behind a streaming engine (`rollout.streaming`) each chunk is submitted with the tokens
    of the turn so far: the scripted model, which resumes mid-turn, writes the same turns."""
    whole, _ = _roll(tokenizer, docs, 0)
    config = dataclasses.replace(RolloutConfig(), max_turns=1, decode_chunk=16, temperature=0)
    backend = StreamingBackend(tokenizer, continuing)
    (streamed,) = run_rollouts(backend, tokenizer, DictRetriever(docs), [FRANCE], config)
    assert [s.text for s in streamed.segments] == [s.text for s in whole.segments]
    assert streamed.searches[0].query == "France capital" and streamed.answer == "Paris"
    assert streamed.stats.stop_reason == "answer" and streamed.stats.turns == 2
    assert len(backend.calls) > 2  # the first turn took several collects
    first_turn = streamed.segments[0]
    assert len(first_turn.token_ids) == len(first_turn.logprobs or []) > 16
