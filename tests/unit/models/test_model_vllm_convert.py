"""The vLLM backend's output conversion, checked without vLLM."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from searchrl.models.vllm_backend import VLLMBackend


def completion(token_ids, finish_reason, stop_reason):  # type: ignore[no-untyped-def]
    logprobs = [{t: SimpleNamespace(logprob=-0.5 * (i + 1))} for i, t in enumerate(token_ids)]
    return SimpleNamespace(
        token_ids=token_ids, logprobs=logprobs, finish_reason=finish_reason, stop_reason=stop_reason
    )


@pytest.mark.parametrize(
    ("finish", "stop", "reason", "string"),
    [
        ("stop", "</search>", "stop", "</search>"),
        ("stop", None, "eos", None),
        ("length", None, "length", None),
    ],
)
def test_stop_reasons_map_to_the_backend_contract(tokenizer, finish, stop, reason, string) -> None:
    ids = tokenizer.encode("<search> q </search>", add_special_tokens=False)
    out = VLLMBackend(llm=None, tokenizer=tokenizer)._convert(completion(ids, finish, stop))
    assert out.token_ids == ids and out.text == "<search> q </search>"
    assert out.stop_reason == reason and out.stop_string == string
    assert out.logprobs == [-0.5 * (i + 1) for i in range(len(ids))]
