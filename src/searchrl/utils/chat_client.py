"""A minimal client for any OpenAI-compatible chat endpoint (`POST {base}/chat/completions`):
vLLM, llama.cpp's server, SGLang, Ollama, or the hosted APIs. Used by the evaluation's
trajectory-quality judge and by the Search-R2 process-reward judge (it lives here, in the
lowest layer, so both `reward` and `eval` can import it).

Every attempt has a timeout; connection errors, timeouts and 5xx answers are retried with
exponential backoff, and the last failure raises `JudgeError` naming the URL. Greedy
(`temperature 0`) so a judgement is reproducible where the server is.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

import orjson
import urllib3
from urllib3.exceptions import HTTPError as TransportError

from searchrl.utils.errors import SearchRLError


class JudgeError(SearchRLError, RuntimeError):
    """A judge cannot run: its endpoint could not be reached or answered with something
    unusable, or (process judges) it lacks what it needs, such as a world's supporting
    passages."""


class ChatSettings(Protocol):
    """What the client reads from a config (`RubricConfig`, the reward's `LLMJudgeConfig`)."""

    @property
    def url(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key_env(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def retries(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...


class ChatClient:
    """`complete(messages)` → the assistant's text. Thread-safe (urllib3's pool is), so one
    client serves concurrent judgements; `connections` is how many it keeps open."""

    def __init__(self, config: ChatSettings, connections: int = 1):
        if not config.url:
            raise JudgeError("an LLM judge needs an endpoint URL (--url http://host:port/v1)")
        self.config = config
        self.endpoint = config.url.rstrip("/") + "/chat/completions"
        self._pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(config.timeout_s), retries=False, maxsize=connections
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.config.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def complete(self, messages: list[dict[str, str]]) -> str:
        """One chat completion, retried on transient failures."""
        body = orjson.dumps(
            {
                "model": self.config.model,
                "messages": messages,
                "temperature": 0.0,
                "max_tokens": self.config.max_tokens,
            }
        )
        last = ""
        for attempt in range(self.config.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                response = self._pool.request(
                    "POST", self.endpoint, body=body, headers=self._headers()
                )
            except TransportError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if response.status >= 500:
                last = f"HTTP {response.status}"
                continue
            if response.status != 200:
                raise JudgeError(
                    f"{self.endpoint}: HTTP {response.status}: {response.data[:200]!r}"
                )
            return _content(response.data, self.endpoint)
        raise JudgeError(f"{self.endpoint}: {self.config.retries + 1} attempts failed ({last})")


def _content(data: bytes, endpoint: str) -> str:
    try:
        payload: Any = orjson.loads(data)
        return str(payload["choices"][0]["message"]["content"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as err:
        raise JudgeError(f"{endpoint}: not a chat completion ({data[:200]!r})") from err
