"""The `llm` process judge against a real OpenAI-compatible HTTP server on 127.0.0.1: good and
malformed answers, a timeout, a refused connection, a 500 then success, and concurrency."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from searchrl.config.train import LLMJudgeConfig, RewardConfig
from searchrl.reward.judges import (
    CachedJudge,
    Collection,
    EndpointJudge,
    JudgeError,
    JudgeRequest,
    make_judge,
)


class _Endpoint(BaseHTTPRequestHandler):
    """Answers by the question: GOOD → a proper verdict, GARBLE → prose without a count,
    SLOW → after 2 s, FLAKY → HTTP 500 on its first request, then a proper verdict."""

    bodies: ClassVar[list[dict]] = []
    flaky_seen: ClassVar[int] = 0
    in_flight: ClassVar[int] = 0
    most_in_flight: ClassVar[int] = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.bodies.append(body)
            cls.in_flight += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            status, data = self._answer(body)
        finally:
            # Out of flight before the reply is written: the client may send its next request
            # the moment it has read this one, before a decrement placed after the write runs
            # (the count then read one more than the client's limit, a flaky failure).
            with cls.lock:
                cls.in_flight -= 1
        self._send(status, data)

    def _answer(self, body: dict) -> tuple[int, bytes]:
        cls = type(self)
        prompt = body["messages"][-1]["content"]
        question = prompt.split("Question: ")[1].split("\n")[0]
        time.sleep(0.2)
        if question.startswith("SLOW"):
            time.sleep(2.0)
        if question.startswith("FLAKY"):
            with cls.lock:
                cls.flaky_seen += 1
                first = cls.flaky_seen == 1
            if first:
                return 500, b'{"error": "warming up"}'
        content = (
            "The weather is nice."
            if question.startswith("GARBLE")
            else "<think>hmm</think>\nCollection 1: yes\nCollection 2: no\nFinal Answer: 1"
        )
        reply = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        return 200, json.dumps(reply).encode()

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Endpoint.bodies, _Endpoint.flaky_seen, _Endpoint.most_in_flight = [], 0, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def request(question: str) -> JudgeRequest:
    docs = (Collection(("1",), "Doc 1 says Paris."), Collection(("2",), "Doc 2 says Lyon."))
    return JudgeRequest(question, ("Paris",), docs)


def judge_at(url: str, **settings: object) -> EndpointJudge:
    return EndpointJudge(LLMJudgeConfig(url=url, model="judge-7b", **settings))  # type: ignore[arg-type]


def test_good_answers_concurrently_with_the_papers_decoding(endpoint: str) -> None:
    judge = judge_at(endpoint, concurrency=4, retries=0)
    judgments = judge.judge([request(f"GOOD {i}") for i in range(8)])
    assert all(j.count == 1 and j.useful == (True, False) and not j.error for j in judgments)
    body = _Endpoint.bodies[0]
    assert body["model"] == "judge-7b" and body["temperature"] == 0.0
    assert body["max_tokens"] == 3000
    assert _Endpoint.most_in_flight > 1  # requests overlapped
    assert _Endpoint.most_in_flight <= 4


def test_malformed_answer_is_counted_not_raised(endpoint: str, caplog) -> None:
    judge = judge_at(endpoint, retries=0)
    with caplog.at_level("WARNING", logger="searchrl.reward.judge"):
        good, bad = judge.judge([request("GOOD"), request("GARBLE")])
    assert good.count == 1
    assert bad.count is None and bad.error.startswith("malformed: no 'Final Answer: N'")
    assert "The weather is nice" in caplog.text


def test_timeout_is_unavailable_and_not_cached(endpoint: str) -> None:
    cached = CachedJudge(judge_at(endpoint, timeout_s=0.5, retries=0), size=10)
    slow, good = cached.judge([request("SLOW"), request("GOOD")])
    assert slow.count is None and slow.error.startswith("unavailable:")
    assert "timed out" in slow.error.lower() or "Timeout" in slow.error
    assert good.count == 1
    again = cached.judge([request("SLOW"), request("GOOD"), request("GOOD 2")])
    assert cached.last.cache_hits == 1  # GOOD remembered, the failed SLOW asked again
    assert again[0].error.startswith("unavailable:") and again[2].count == 1


def test_500_then_success_is_retried(endpoint: str) -> None:
    judgment = judge_at(endpoint, retries=1).judge([request("FLAKY")])[0]
    assert judgment.count == 1 and len(_Endpoint.bodies) == 2


def test_refused_connection_raises_a_clear_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = judge_at(f"http://127.0.0.1:{port}/v1", retries=1, timeout_s=2)
    with pytest.raises(JudgeError, match=rf"127.0.0.1:{port}/v1 up\?.*2 attempts failed"):
        judge.judge([request("GOOD"), request("GOOD again")])


def test_make_judge_builds_the_endpoint_judge_behind_the_cache(endpoint: str) -> None:
    config = RewardConfig(
        kind="hybrid", judge="llm", llm_judge=LLMJudgeConfig(url=endpoint, model="m")
    )
    judge = make_judge(config)
    assert judge.name == "llm" and isinstance(judge.inner, EndpointJudge)
    assert judge.judge([request("GOOD")])[0].count == 1
