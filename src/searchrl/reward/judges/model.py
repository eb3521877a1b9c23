"""The two model judges, both on the paper's prompt: `llm` asks an OpenAI-compatible endpoint
(vLLM, llama.cpp's server, SGLang) with several requests in flight; `local` runs the prompt
through the project's generation backend, all requests of a step in one batched call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from searchrl.config.train import LLMJudgeConfig
from searchrl.data.templates import render_chat
from searchrl.models.generation import GenerationBackend, SamplingParams
from searchrl.reward.judges.base import JudgeError, JudgeRequest, Judgment
from searchrl.reward.judges.prompt import parse_judgment, render_prompt
from searchrl.utils.chat_client import ChatClient

log = logging.getLogger("searchrl.reward.judge")


def _log_malformed(judge: str, judgment: Judgment) -> Judgment:
    if judgment.error:
        log.warning("%s judge: %s", judge, judgment.error)
    return judgment


class EndpointJudge:
    """The `llm` judge. Each request is one chat completion (greedy, `max_tokens`), sent
    `concurrency` at a time; the client retries connection errors, timeouts and 5xx answers.
    A request that still fails is an `unavailable:` judgment and a reply in the wrong format
    a `malformed:` one (both logged, neither stops training); when every request of a batch
    fails the endpoint is down and JudgeError says so."""

    name = "llm"

    def __init__(self, config: LLMJudgeConfig) -> None:
        if not config.url:
            raise JudgeError("the llm judge needs reward.llm_judge.url (http://host:port/v1)")
        self.config = config
        self.client = ChatClient(config, connections=config.concurrency)

    def _one(self, request: JudgeRequest) -> Judgment:
        messages = [{"role": "user", "content": render_prompt(request)}]
        try:
            reply = self.client.complete(messages)
        except JudgeError as err:
            return Judgment(None, error=f"unavailable: {err}")
        return parse_judgment(reply, len(request.collections))

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            judgments = list(pool.map(self._one, requests))
        failed = [j for j in judgments if j.error.startswith("unavailable")]
        if len(failed) == len(judgments):
            raise JudgeError(
                f"the llm judge's endpoint answered none of {len(judgments)} requests; is "
                f"the server at {self.config.url} up? ({failed[0].error})"
            )
        return [_log_malformed(self.name, j) for j in judgments]


class LocalJudge:
    """The `local` judge: the same prompt, greedy, through a `GenerationBackend` (the policy's
    own engine, or a separately loaded model), every request of a step in one call. Instruct
    models get the prompt inside their chat template."""

    name = "local"

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: object,
        max_tokens: int,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    def _encode(self, text: str) -> list[int]:
        rendered = render_chat(self.tokenizer, text)  # type: ignore[arg-type]
        return list(self.tokenizer.encode(rendered, add_special_tokens=False))  # type: ignore[attr-defined]

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        if not requests:
            return []
        prompts = [self._encode(render_prompt(r)) for r in requests]
        params = [SamplingParams(max_new_tokens=self.max_tokens, temperature=0.0)] * len(prompts)
        outputs = self.backend.generate(prompts, params)
        return [
            _log_malformed(self.name, parse_judgment(out.text, len(r.collections)))
            for r, out in zip(requests, outputs, strict=True)
        ]
