"""What an evaluation row keeps so a failure can be read per question: the prediction, the
queries, how the trajectory ended, the passages shown under the observation budget and
whether the gold was among them; and the failure table `searchrl eval` prints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.cli.eval import _print_summary, failure_rich_table
from searchrl.config.eval import EvalConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.comparison import is_comparison
from searchrl.eval.evidence import cause, failure_table, holds_answer
from searchrl.eval.harness import Resources, evaluate
from searchrl.models.loading import Policy
from searchrl.types import Document, Question

LONG = " ".join(["filler"] * 60)
DOCS = [
    Document("near", f'"Gustave Eiffel"\nGustave Eiffel designed towers. {LONG}'),
    Document("far", f'"Dijon"\nThe birthplace of Gustave Eiffel is Dijon, Burgundy. {LONG}'),
    Document("other", '"Paris"\nParis is the capital of France.'),
]
BORN = Question("q:born", "Where was Gustave Eiffel born", ("Dijon",), "nq")
CAPITAL = Question("q:capital", "What is the capital of France", ("Paris",), "nq")
SAME = Question("q:same", "Were Eiffel and Rodin both French?", ("yes",), "hotpotqa")


def searcher(context: str) -> str:
    """Searches the question once, then answers what the first passage's title says."""
    if "Doc 1(Title" not in context:
        question = context.split("Question: ")[-1].split("?")[0]
        return f"<think> search </think>\n<search> {question} </search>"
    title = context.split("Doc 1(Title: ")[-1].split(")")[0].strip('"')
    return f"<think> read </think>\n<answer> {title} </answer>"


def _evaluate(tokenizer, out: Path, method: str, obs_tokens: int) -> list[dict]:
    policy = Policy(ScriptedBackend(tokenizer, searcher), tokenizer, None)
    rollout = replace(RolloutConfig(), max_obs_tokens=obs_tokens, max_turns=2, topk=3)
    config = EvalConfig(method=method, progress=False, bootstrap_resamples=100, rollout=rollout)
    resources = Resources(lambda: DictRetriever(DOCS), lambda: policy)
    summary = evaluate(config, [BORN, CAPITAL, SAME], out, resources)
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert summary["failures"]["all"]["n"] == 3
    return rows


def test_rows_carry_queries_the_passages_shown_and_whether_the_gold_was_among_them(
    tokenizer, tmp_path
) -> None:
    wide, narrow = (_evaluate(tokenizer, tmp_path / str(n), "sft", n) for n in (400, 60))
    born = {r["id"]: r for r in wide}["q:born"]
    assert born["queries"] == ["Where was Gustave Eiffel born"]
    assert born["prediction"] == "Gustave Eiffel" and born["stop_reason"] == "answer"
    assert born["shown"][:2] == ["near", "far"] and born["gold_shown"] is True
    assert cause(born) == "shown_wrong"
    # a 60-token observation cuts the second passage off: retrieved, never shown
    cut = {r["id"]: r for r in narrow}["q:born"]
    assert cut["trajectory"]["searches"][0]["doc_ids"][:2] == ["near", "far"]
    assert cut["shown"] == ["near"] and cut["gold_shown"] is False
    assert cause(cut) == "never_shown"


def test_the_rag_baseline_shows_its_passages_in_the_prompt(tokenizer, tmp_path) -> None:
    rows = {r["id"]: r for r in _evaluate(tokenizer, tmp_path, "rag", 60)}
    assert rows["q:capital"]["queries"] == ["What is the capital of France"]
    assert "other" in rows["q:capital"]["shown"] and rows["q:capital"]["gold_shown"] is True
    assert set(rows["q:born"]["shown"]) == {"near", "far", "other"}  # whole, not budgeted


def test_every_wrong_answer_has_one_cause() -> None:
    base = {"set": "nq", "question": "Where was Gustave Eiffel born?", "golden_answers": ["Dijon"]}
    rows = [
        {**base, "em": 1.0, "prediction": "Dijon", "gold_shown": True},
        {**base, "em": 0.0, "prediction": None, "gold_shown": True},
        {**base, "em": 0.0, "prediction": "Paris", "gold_shown": True},
        {**base, "em": 0.0, "prediction": "Paris", "gold_shown": False},
        {**base, "set": "hotpotqa", "question": "Is Dijon or Lyon larger?", "em": 0.0,
         "prediction": "Dijon", "golden_answers": ["Lyon"], "gold_shown": True},
        {**base, "set": "hotpotqa", "question": "Were both French?", "em": 1.0,
         "prediction": "yes", "golden_answers": ["yes"], "gold_shown": False},
        {**base, "em": 0.0, "prediction": "Paris"},  # an old row: no gold_shown
    ]  # fmt: skip
    assert [cause(r) for r in rows] == [
        None, "no_answer", "shown_wrong", "never_shown", "comparison", None, "unknown",
    ]  # fmt: skip
    table = failure_table(rows)
    assert list(table) == ["nq", "hotpotqa", "all"]
    assert table["nq"] == {
        "n": 5, "right": 1, "no_answer": 1, "comparison": 0, "shown_wrong": 1,
        "never_shown": 1, "unknown": 1, "comparisons": 0, "comparisons_right": 0,
        "gold_shown": 3,
    }  # fmt: skip
    assert table["hotpotqa"]["comparisons"] == 2 and table["hotpotqa"]["comparisons_right"] == 1
    assert table["all"]["n"] == 7 and table["all"]["right"] == 2
    console = Console(record=True, width=200)
    console.print(failure_rich_table(table))
    text = console.export_text()
    assert "shown, wrong" in text and "1 / 2 right" in text and "neither column" in text


def test_the_eval_tables_are_not_squeezed_into_a_log(capsys) -> None:
    """Piped into a benchmark's log, `searchrl eval`'s tables keep their columns whole
    (rich's 80-column default wrapped "shown, wrong" and every interval over two lines)."""
    counts = {
        "n": 100,
        "right": 17,
        "no_answer": 0,
        "comparison": 2,
        "shown_wrong": 67,
        "never_shown": 14,
        "comparisons": 3,
        "comparisons_right": 1,
        "gold_shown": 85,
    }
    block = {
        "n": 100,
        "em": {"mean": 0.17, "low": 0.109, "high": 0.255},
        "f1": {"mean": 0.2},
        "subem": {"mean": 0.2},
        "searches": {"mean": 1.04},
        "tokens": {"mean": 104.0},
    }
    summary = {"method": "sft", "model": "embedded-warm", "by_set": {"2wikimultihopqa": block},
               "overall": block, "average": block, "missing": 0,
               "failures": {"2wikimultihopqa": counts, "all": counts}}  # fmt: skip
    _print_summary(summary, Path("runs/some/where"))
    lines = capsys.readouterr().out.splitlines()
    assert any("2wikimultihopqa" in line and "0.170 [0.109, 0.255]" in line for line in lines)
    assert any("shown, wrong" in line and "gold shown" in line for line in lines)
    assert any("2wikimultihopqa" in line and "1 / 3 right" in line for line in lines)


def test_gold_matching_is_normalized_whole_words() -> None:
    assert holds_answer("Born in Dijon, France.", ["dijon"])
    assert not holds_answer("Born in Dijonnais country.", ["Dijon"])
    assert not holds_answer("anything", ["", "  "])
    assert is_comparison("Which is older, the Louvre or the Prado?", ["The Louvre"])
    assert is_comparison("Are both French?", ["Yes"])
    assert not is_comparison("Where was Eiffel born?", ["Dijon"])


def test_a_long_trajectory_does_not_hold_its_batch(tokenizer, tmp_path) -> None:
    """Issue 64: one row searching turn after turn while its batch had finished left the engine
    decoding a single row; streamed, new questions join its generation calls."""
    questions = [Question(f"q:{i}", f"Question number {i}", ("x",), "nq") for i in range(9)]

    def script(context: str) -> str:
        if "Question number 0" in context:  # never answers: runs to the turn limit
            return "<think> more </think>\n<search> again </search>"
        return "<answer> x </answer>"

    backend = ScriptedBackend(tokenizer, script)
    policy = Policy(backend, tokenizer, None)
    rollout = replace(RolloutConfig(), max_turns=6, force_answer=True)
    config = EvalConfig(method="search-r1", batch_size=3, progress=False,
                        bootstrap_resamples=100, rollout=rollout)  # fmt: skip
    evaluate(config, questions, tmp_path, Resources(lambda: DictRetriever(DOCS), lambda: policy))
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(q.uid for q in questions)
    assert {r["id"]: r["searches"] for r in rows}["q:0"] == 6
    widths = [len(call) for call in backend.calls]
    # the long row never decodes alone while questions wait: 8 short ones in 4 calls beside it
    assert widths[:4] == [3, 3, 3, 3] and sum(widths) == 8 + 6 + 2
    assert rows[0]["id"] != "q:0"  # finished questions are written first
