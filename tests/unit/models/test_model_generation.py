"""The HF backend's sampling loop: stop rules, token fidelity, per-row determinism."""

from __future__ import annotations

import pytest
import torch

from searchrl.models.generation import SamplingParams, sample_tokens
from searchrl.models.hf_backend import HFBackend

STOPS = ("</search>", "</answer>")


def test_stop_string_ends_the_row_right_after_the_tag(tokenizer, scripted) -> None:
    model, prompts = scripted(
        [("Question one?", " I should look it up. <search> capital of France </search> more")]
    )
    backend = HFBackend(model, tokenizer, max_batch_size=4)
    (out,) = backend.generate(prompts, [SamplingParams(max_new_tokens=50, stop=STOPS)])
    assert out.stop_reason == "stop" and out.stop_string == "</search>"
    assert out.text == " I should look it up. <search> capital of France </search>"
    assert tokenizer.decode(out.token_ids) == out.text
    assert len(out.logprobs) == len(out.token_ids)


def test_stop_string_ending_mid_token_keeps_the_generated_token(tokenizer, scripted) -> None:
    # "</answer>." ends with the single token ">.": the row stops on it and keeps it whole.
    model, prompts = scripted([("Who?", " <answer> Paris</answer>. And more")])
    backend = HFBackend(model, tokenizer, max_batch_size=4)
    (out,) = backend.generate(prompts, [SamplingParams(max_new_tokens=50, stop=STOPS)])
    expected = tokenizer.encode(" <answer> Paris</answer>.", add_special_tokens=False)
    assert out.token_ids == expected
    assert out.text.endswith("</answer>.") and out.stop_string == "</answer>"


def test_rows_finish_independently_eos_stop_and_length(tokenizer, scripted) -> None:
    model, prompts = scripted(
        [
            ("First prompt.", " short <answer> A </answer> tail"),
            ("Second one:", " Some longer reasoning goes here then <search> q </search>"),
            ("Third text!", " never stops and keeps going and going on"),
        ]
    )
    backend = HFBackend(model, tokenizer, max_batch_size=8)
    params = [SamplingParams(max_new_tokens=40, stop=STOPS)] * 2
    params.append(SamplingParams(max_new_tokens=5, stop=STOPS))
    answer, search, long = backend.generate(prompts, params)
    assert answer.text == " short <answer> A </answer>"
    assert search.text.endswith("<search> q </search>")
    assert long.stop_reason == "length" and len(long.token_ids) == 5
    eos_model, eos_prompts = scripted([("Done?", " yes")])
    (eos,) = HFBackend(eos_model, tokenizer, max_batch_size=2).generate(
        eos_prompts, [SamplingParams(max_new_tokens=9, stop=STOPS)]
    )
    assert eos.stop_reason == "eos" and eos.token_ids[-1] == tokenizer.eos_token_id


def test_a_row_samples_the_same_tokens_alone_or_in_a_batch(tokenizer, tiny) -> None:
    backend = HFBackend(tiny, tokenizer, max_batch_size=8)
    prompts = [tokenizer.encode(t) for t in ("a b c d e f", "hello", "what is the capital?")]
    params = [SamplingParams(max_new_tokens=12, seed=s, top_p=0.9) for s in (1, 2, 3)]
    batched = backend.generate(prompts, params)
    alone = backend.generate(prompts[1:2], params[1:2])[0]
    assert alone.token_ids == batched[1].token_ids
    assert alone.logprobs == pytest.approx(batched[1].logprobs, abs=1e-4)
    assert batched[0].token_ids != batched[2].token_ids
    again = backend.generate(prompts, params)
    assert [g.token_ids for g in again] == [g.token_ids for g in batched]


def test_greedy_follows_the_argmax_and_reports_model_logprobs(tokenizer, tiny) -> None:
    backend = HFBackend(tiny, tokenizer, max_batch_size=2)
    prompt = tokenizer.encode("The answer is")
    (out,) = backend.generate([prompt], [SamplingParams(max_new_tokens=4, temperature=0.0)])
    with torch.no_grad():
        logits = tiny(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    assert out.token_ids == logprobs.argmax(-1).tolist()
    expected = logprobs.gather(1, torch.tensor(out.token_ids)[:, None]).squeeze(1)
    assert out.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_bf16_copy_generates_and_resyncs_without_touching_the_policy(tokenizer, tiny) -> None:
    backend = HFBackend(tiny, tokenizer, max_batch_size=2, generation_dtype=torch.bfloat16)
    assert tiny.dtype == torch.float32
    prompt = [tokenizer.encode("hello")]
    (before,) = backend.generate(prompt, [SamplingParams(max_new_tokens=3, temperature=0.0)])
    with torch.no_grad():
        tiny.lm_head.weight.mul_(-1.0)
    backend.sync_weights()
    (after,) = backend.generate(prompt, [SamplingParams(max_new_tokens=3, temperature=0.0)])
    with torch.no_grad():
        tiny.lm_head.weight.mul_(-1.0)
    assert before.token_ids != after.token_ids


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    seen = set()
    for seed in range(200):
        params = [SamplingParams(max_new_tokens=1, top_p=0.7, seed=seed)]
        token, logprob = sample_tokens(logits, params, [torch.Generator().manual_seed(seed)])
        seen.add(int(token))
        expected = {0: 0.5 / 0.8, 1: 0.3 / 0.8}[int(token)]
        assert float(logprob.exp()) == pytest.approx(expected, rel=1e-5)
    assert seen == {0, 1}
