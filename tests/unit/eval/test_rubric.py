"""The trajectory-quality rubric: the rules, the random pair order, wins/losses/ties, and the
LLM judge against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from searchrl.config.eval import RubricConfig
from searchrl.eval.rubric import (
    DIMENSIONS,
    LLMJudge,
    RuleJudge,
    groundedness,
    judge_pairs,
    judge_runs,
    non_redundancy,
    parse_scores,
    parse_single,
)
from searchrl.utils.chat_client import ChatClient, JudgeError


def traj_row(rid: str, prediction: str | None, docs: dict, searches: list, text: str = "") -> dict:
    return {
        "id": rid, "set": "nq", "question": "Q?", "golden_answers": ["Paris"],
        "prediction": prediction, "documents": docs,
        "trajectory": {"segments": [{"role": "policy", "text": text or "<answer>x</answer>"}],
                       "searches": searches},
    }  # fmt: skip


def call(query: str, ids: list[str]) -> dict:
    return {"query": query, "doc_ids": ids, "turn": 1}


def test_groundedness_rule() -> None:
    docs = {"d1": '"Paris"\nParis is the capital of France.'}
    assert groundedness(traj_row("a", "Paris", docs, [])) == 2
    assert groundedness(traj_row("a", "capital city", docs, [])) == 1
    assert groundedness(traj_row("a", "Lyon", docs, [])) == 0
    assert groundedness(traj_row("a", None, docs, [])) == 0
    assert groundedness(traj_row("a", "Paris", {}, [])) == 0


def test_non_redundancy_rule() -> None:
    assert non_redundancy(traj_row("a", "x", {}, [])) == 2
    fresh = [call("capital of France", ["d1"]), call("Eiffel tower", ["d2"])]
    assert non_redundancy(traj_row("a", "x", {}, fresh)) == 2
    repeated = [call("capital of France", ["d1"]), call("Capital of France!", ["d9"])]
    assert non_redundancy(traj_row("a", "x", {}, repeated)) == 1
    stale = [call("a", ["d1", "d2"]), call("b", ["d2"]), call("c", ["d1"])]
    assert non_redundancy(traj_row("a", "x", {}, stale)) == 0


class FirstShownWins:
    """A judge with a pure position bias: whatever is shown first scores 2, the other 0."""

    def __init__(self) -> None:
        self.orders: list[str] = []

    def score_pair(self, first: dict, second: dict) -> tuple[dict, dict]:
        self.orders.append(first["id"][0])
        return dict.fromkeys(DIMENSIONS, 2), dict.fromkeys(DIMENSIONS, 0)


def test_pair_order_is_randomised_and_mapped_back() -> None:
    pairs = [(traj_row(f"a{i}", "x", {}, []), traj_row(f"b{i}", "x", {}, [])) for i in range(200)]
    judge = FirstShownWins()
    records = judge_pairs(pairs, judge, seed=0, shown="pair")
    shown_a_first = judge.orders.count("a")
    assert 70 < shown_a_first < 130  # both orders occur, about half each
    wins = sum(r["a"]["coherence"] > r["b"]["coherence"] for r in records)
    assert wins == shown_a_first  # A wins exactly when it was shown first: mapping is right
    assert all(r["order"] == ("AB" if r["a"]["coherence"] == 2 else "BA") for r in records)


def test_parse_single() -> None:
    scores = parse_single('Here: {"note": 1} {"coherence": 2, "query_timing": 0} bye')
    assert scores["coherence"] == 2 and scores["query_timing"] == 0
    assert scores["information_density"] is None
    with pytest.raises(ValueError):
        parse_single('{"verdict": "fine"}')


def test_parse_scores() -> None:
    text = 'Sure. {"A": {"coherence": 2, "query_timing": 1}, "B": {"coherence": 0}} done'
    a, b = parse_scores(text)
    assert a["coherence"] == 2 and a["query_timing"] == 1 and a["uncertainty_handling"] is None
    assert b["coherence"] == 0
    assert parse_scores('{"A": {"coherence": 7}, "B": {}}')[0]["coherence"] is None
    with pytest.raises(ValueError):
        parse_scores("no json here")


class _Judge(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that gives 2 on every dimension to the trajectory saying
    GOOD and 1 to the other, wherever it is shown; 'garbage' for trajectories saying GARBLE.
    A prompt with one trajectory gets one score map, a prompt with A and B gets both."""

    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        prompt = body["messages"][-1]["content"]
        if "GARBLE" in prompt:
            content = "I refuse to use JSON."
        elif "Trajectory A:" not in prompt:
            content = "Scores: " + json.dumps(
                dict.fromkeys(DIMENSIONS, 2 if "GOOD" in prompt else 1)
            )
        else:
            a_text = prompt.split("Trajectory A:")[1].split("Trajectory B:")[0]
            good, other = dict.fromkeys(DIMENSIONS, 2), dict.fromkeys(DIMENSIONS, 1)
            content = json.dumps({"A": good, "B": other} if "GOOD" in a_text
                                 else {"A": other, "B": good})  # fmt: skip
        reply = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Judge.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def write_run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_llm_judge_reads_each_trajectory_on_its_own(endpoint, tmp_path) -> None:
    good = [traj_row(f"q{i}", "x", {}, [], text="GOOD reasoning") for i in range(20)]
    plain = [traj_row(f"q{i}", "x", {}, [], text="plain reasoning") for i in range(20)]
    a = write_run(tmp_path / "a", good)
    b = write_run(tmp_path / "b", plain)
    config = RubricConfig(kind="llm", url=endpoint, model="judge", per_set=0, retries=0)
    result = judge_runs(a, b, config)
    assert result["pairs"] == 20 and len(_Judge.requests) == 40  # one request per trajectory
    for request in _Judge.requests:
        prompt = request["messages"][-1]["content"]
        assert prompt.count("Trajectory:") == 1 and "Trajectory A" not in prompt
        assert ("GOOD" in prompt) != ("plain" in prompt)  # never both methods in one prompt
    assert {r["order"] for r in result["records"]} == {"single"} and result["shown"] == "single"
    for dim in DIMENSIONS:
        assert result["overall"][dim] == {"wins": 20, "losses": 0, "ties": 0, "unscored": 0}


def test_llm_judge_in_pair_mode_counts_wins_losses_and_ties(endpoint, tmp_path) -> None:
    good = [traj_row(f"q{i}", "x", {}, [], text="GOOD reasoning") for i in range(20)]
    plain = [traj_row(f"q{i}", "x", {}, [], text="plain reasoning") for i in range(20)]
    a = write_run(tmp_path / "a", good)
    b = write_run(tmp_path / "b", plain)
    config = RubricConfig(
        kind="llm", url=endpoint, model="judge", per_set=0, retries=0, shown="pair"
    )
    result = judge_runs(a, b, config)
    assert result["pairs"] == 20 and len(_Judge.requests) == 20
    assert _Judge.requests[0]["model"] == "judge" and _Judge.requests[0]["temperature"] == 0.0
    orders = {r["order"] for r in result["records"]}
    assert orders == {"AB", "BA"}
    for dim in DIMENSIONS:
        assert result["overall"][dim] == {"wins": 20, "losses": 0, "ties": 0, "unscored": 0}
    rule = judge_runs(a, a, RubricConfig(kind="rule", per_set=0))
    assert rule["overall"]["non_redundancy"]["ties"] == 20
    assert rule["overall"]["coherence"]["unscored"] == 20  # no rule: unscored, not a tie


def test_llm_judge_leaves_unparsable_replies_unscored(endpoint) -> None:
    judge = LLMJudge(ChatClient(RubricConfig(kind="llm", url=endpoint, retries=1)), retries=1)
    a, b = judge.score_pair(traj_row("q", "x", {}, [], "GARBLE"), traj_row("q", "x", {}, []))
    assert set(a.values()) == {None} and set(b.values()) == {None}
    assert len(_Judge.requests) == 2  # retried once
    assert set(judge.score(traj_row("q", "x", {}, [], "GARBLE")).values()) == {None}
    assert len(_Judge.requests) == 4


def test_client_reports_an_unreachable_endpoint() -> None:
    client = ChatClient(RubricConfig(url="http://127.0.0.1:9/v1", retries=1, timeout_s=2))
    with pytest.raises(JudgeError, match="2 attempts failed"):
        client.complete([{"role": "user", "content": "hi"}])


def test_rule_judge_scores_only_ruled_dimensions() -> None:
    scores = RuleJudge().score(traj_row("a", "Paris", {"d": "Paris"}, []))
    ruled = {"evidence_groundedness", "non_redundancy"}
    assert scores["evidence_groundedness"] == 2 and scores["non_redundancy"] == 2
    assert all(scores[d] is None for d in DIMENSIONS if d not in ruled)
