"""Each method of `searchrl eval` on a scripted backend and an in-memory retriever: what it
prompts, what it retrieves (one batched call per round), what it records."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.eval import EvalConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.data.templates import cot_prompt, direct_prompt, r1_prompt, search_r1_prompt
from searchrl.eval.methods import Context, RecordingRetriever
from searchrl.eval.prompts import IRCOT_DEMONSTRATIONS, REASON_IN_DOCUMENTS_TEMPLATE
from searchrl.eval.registry import METHODS, method
from searchrl.types import Document, Hit, Question, Trajectory

FRANCE = Question("q1", "What is the capital of France", ("Paris",))
EIFFEL = Question("q2", "Where was the designer of the Eiffel Tower born?", ("Dijon",))
CONFIG = EvalConfig()


def ctx(tokenizer, script, retriever=None) -> Context:
    return Context(ScriptedBackend(tokenizer, script), tokenizer, retriever, CONFIG)


def test_registry_holds_every_method_of_the_papers() -> None:
    names = {"direct", "cot", "rag", "ircot", "search-o1", "r1", "sft", "rejection", "search-r1"}
    assert names <= set(METHODS)
    assert not method("direct").retrieval and method("rag").retrieval
    assert method("search-r1").trained and not method("ircot").trained


def test_direct_takes_a_bare_reply_as_the_answer(tokenizer) -> None:
    context = ctx(tokenizer, lambda c: "Paris\nIt is a big city.")
    (out,) = method("direct").run([FRANCE], context)
    traj = out.trajectory
    assert direct_prompt(FRANCE.question) in traj.prompt
    assert traj.answer == "Paris" and traj.metrics["em"] == 1.0
    assert traj.stats.searches == 0


def test_cot_needs_the_answer_tags(tokenizer) -> None:
    replies = {"France": "<think>It is Paris.</think> Paris", "Eiffel": "<answer>Dijon</answer>"}
    context = ctx(tokenizer, lambda c: replies["France" if "France" in c else "Eiffel"])
    first, second = method("cot").run([FRANCE, EIFFEL], context)
    assert cot_prompt(FRANCE.question) in first.trajectory.prompt
    assert first.trajectory.answer is None and first.trajectory.metrics["em"] == 0.0
    assert second.trajectory.answer == "Dijon"


def test_rag_searches_all_questions_in_one_call_and_shows_top_k(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    context = ctx(tokenizer, lambda c: "<answer> Paris </answer>", retriever)
    outs = method("rag").run([FRANCE, EIFFEL], context)
    assert retriever.calls == [[FRANCE.question, EIFFEL.question]]
    traj = outs[0].trajectory
    assert "Doc 1(Title: " in traj.prompt and "Doc 4(Title: " not in traj.prompt
    assert traj.stats.searches == 1 and len(traj.searches[0].doc_ids) == 3
    assert [s.role for s in traj.segments] == ["policy"]


def test_ircot_queries_with_each_line_and_shows_only_new_passages(tokenizer, docs) -> None:
    def script(context: str) -> str:
        if "Gustave Eiffel designed it" not in context:
            return "Gustave Eiffel designed it in Germany, Berlin.\n"
        return "So the answer is <answer> Dijon </answer>"

    retriever = DictRetriever(docs)
    (out,) = method("ircot").run([EIFFEL], ctx(tokenizer, script, retriever))
    traj = out.trajectory
    assert retriever.calls[0] == [EIFFEL.question]
    assert retriever.calls[1] == ["Gustave Eiffel designed it in Germany, Berlin."]
    assert [s.role for s in traj.segments] == ["env", "policy", "env", "policy"]
    first, second = traj.searches
    assert set(second.doc_ids) - set(first.doc_ids) == {"d3"}
    new_block = traj.segments[2].text
    assert "Berlin is the capital" in new_block and "Doc 2(" not in new_block  # only new ones
    assert traj.answer == "Dijon" and traj.stats.searches == 2


def test_ircot_stops_searching_at_the_budget(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    context = ctx(tokenizer, lambda c: "I wonder about the Eiffel Tower.\n", retriever)
    (out,) = method("ircot").run([EIFFEL], context)
    assert out.trajectory.stats.searches == CONFIG.rollout.max_turns
    assert out.trajectory.answer is None


def test_search_o1_inserts_the_reason_in_documents_summary(tokenizer, docs) -> None:
    def script(context: str) -> str:
        if "Searched documents:" in context:  # the Reason-in-Documents call
            return "Final Information: Gustave Eiffel was born in Dijon."
        if "<information>" not in context.split("Question:")[-1]:
            return "<search> Gustave Eiffel birthplace </search>"
        return "<answer> Dijon </answer>"

    retriever = DictRetriever(docs)
    (out,) = method("search-o1").run([EIFFEL], ctx(tokenizer, script, retriever))
    traj = out.trajectory
    assert retriever.calls == [["Gustave Eiffel birthplace"]]
    env = [s.text for s in traj.segments if s.role == "env"]
    assert env == ["\n\n<information>Gustave Eiffel was born in Dijon.</information>\n\n"]
    assert traj.answer == "Dijon" and out.aux_tokens > 0
    assert "Doc 1(Title:" not in traj.response_text  # raw passages never reach the policy
    assert REASON_IN_DOCUMENTS_TEMPLATE.split("{")[0] not in traj.prompt


def test_trained_policies_use_the_rollout_engine(tokenizer, docs) -> None:
    retriever = RecordingRetriever(DictRetriever(docs))

    def script(context: str) -> str:
        if "<information>" in context.split("Question:")[-1]:
            return "<answer> Paris </answer>"
        return "<search> capital of France </search>"

    (searched,) = method("search-r1").run([FRANCE], ctx(tokenizer, script, retriever))
    assert search_r1_prompt(FRANCE.question) in searched.trajectory.prompt
    assert searched.trajectory.stats.searches == 1 and searched.trajectory.answer == "Paris"
    assert set(retriever.documents) == set(searched.trajectory.searches[0].doc_ids)
    (r1,) = method("r1").run([FRANCE], ctx(tokenizer, script, retriever))
    assert r1_prompt(FRANCE.question) in r1.trajectory.prompt
    assert r1.trajectory.stats.searches == 0


def test_ircot_accepts_its_own_answer_is_ending(tokenizer, docs) -> None:
    replies = iter(["I wonder what the answer is.\n", "So the answer is Dijon.\n"])
    context = ctx(tokenizer, lambda c: next(replies), DictRetriever(docs))
    (out,) = method("ircot").run([EIFFEL], context)
    assert out.trajectory.answer == "Dijon" and out.trajectory.metrics["em"] == 1.0
    assert out.trajectory.stats.searches == 2  # the question, then the first line


class Searcher:
    """Search once, then answer; every answer is new (`A1`, `A2`, …), so a regenerated
    suffix can be told apart from the first pass."""

    def __init__(self) -> None:
        self.answers = 0

    def __call__(self, context: str) -> str:
        if "Doc 1(Title" not in context:
            return "<think> look it up </think>\n<search> Eiffel Tower </search>"
        self.answers += 1
        return f"<answer> A{self.answers} </answer>"


def test_search_r2_refines_after_the_rollout(tokenizer, tiny, docs) -> None:
    script = Searcher()
    config = replace(CONFIG, refiner=RefinerConfig(margin=-100.0, max_revisions=2))
    context = Context(
        ScriptedBackend(tokenizer, script), tokenizer, DictRetriever(docs), config, tiny
    )
    (out,) = method("search-r2").run([EIFFEL], context)
    traj, record = out.trajectory, out.trajectory.refinement
    assert method("search-r2").trained and method("search-r2").retrieval
    assert record is not None and record.revised and record.revisions == 2  # τ = −100
    assert record.original_answer == "A1" and traj.answer == "A3"
    assert len(record.decisions) == 2 and record.decisions[0].decision.role == "meta"
    argmax = 1 + max(range(2), key=lambda i: record.decisions[-1].answer_logprobs[1 + i])
    assert record.cut_step == argmax  # the trimmer's argmax at evaluation
    assert Trajectory.from_json(traj.to_json()).refinement == record  # kept in samples.jsonl

    accept = replace(CONFIG, refiner=RefinerConfig(margin=100.0))
    context = Context(
        ScriptedBackend(tokenizer, Searcher()), tokenizer, DictRetriever(docs), accept, tiny
    )
    (out,) = method("search-r2").run([EIFFEL], context)
    assert out.trajectory.answer == "A1" and not out.trajectory.refinement.revised


def test_search_r2_needs_the_weights(tokenizer, docs) -> None:
    context = ctx(tokenizer, Searcher(), DictRetriever(docs))
    with pytest.raises(ValueError, match="weights"):
        method("search-r2").run([EIFFEL], context)


def test_registry_holds_the_fine_tuned_baselines() -> None:
    for name, searches in (("direct-ft", False), ("rag-ft", True)):
        assert method(name).trained and method(name).retrieval == searches


class Scripted:
    """A search engine returning a fixed list of passages per query."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers

    def search(self, queries, k):
        return [
            [Hit(Document(f"{q}-{i}", text), 1.0) for i, text in enumerate(self.answers[q][:k])]
            for q in queries
        ]


def test_ircot_is_few_shot_and_its_demonstrations_look_like_its_runs(tokenizer) -> None:
    demo = IRCOT_DEMONSTRATIONS[0]
    (first_docs, first_line), (second_docs, second_line) = demo.steps
    lines = iter([first_line + "\n", second_line + "\n"])
    retriever = Scripted({demo.question: list(first_docs), first_line: list(second_docs)})
    question = Question("d", demo.question, ("July 21, 1899",))
    (out,) = method("ircot").run([question], ctx(tokenizer, lambda c: next(lines), retriever))
    traj = out.trajectory
    assert traj.answer == "July 21, 1899" and traj.metrics["em"] == 1.0
    # the run, written out, is the demonstration: same layout, same passage format
    assert f"Question: {demo.question}?\n" + traj.response_text == demo.render()
    assert len(IRCOT_DEMONSTRATIONS) >= 2
    for example in IRCOT_DEMONSTRATIONS:
        assert example.render() in traj.prompt  # every demonstration precedes the question
        assert "So the answer is: " in example.steps[-1][1]
    assert traj.prompt.index(IRCOT_DEMONSTRATIONS[-1].render()) < traj.prompt.index(
        f"Question: {demo.question}?\n", len(traj.prompt) - 200
    )


def test_search_r2_reports_the_actor_without_the_refiner_too(
    tokenizer, tiny, docs, tmp_path
) -> None:
    """The paper validates the trained Actor greedily without the refiner; `search-r2` keeps
    that number next to the refined one, with the paired gain of test-time refinement."""
    from searchrl.eval.harness import Resources, evaluate
    from searchrl.models.loading import Policy

    gold = [Question(f"w:{i}", f"Question {i}?", ("A2",), "w", hops=1) for i in range(4)]
    config = replace(
        CONFIG, method="search-r2", progress=False, bootstrap_resamples=200,
        refiner=RefinerConfig(margin=-100.0, max_revisions=1),
    )  # fmt: skip

    def resources(script: Searcher) -> Resources:
        policy = Policy(ScriptedBackend(tokenizer, script), tokenizer, tiny)
        return Resources(open_retriever=lambda: DictRetriever(docs), load_policy=lambda: policy)

    # one backend for the batch: the Actor answers A1..A4, the regenerations A5..A8 (all wrong)
    summary = evaluate(config, gold, tmp_path / "wrong", resources(Searcher()))
    assert summary["actor"]["revised"] == 1.0

    class SecondTry(Searcher):
        """Per question: wrong at first (A1), right once regenerated (A2)."""

        def __init__(self) -> None:
            self.seen: set[str] = set()

        def __call__(self, context: str) -> str:
            if "Doc 1(Title" not in context:
                return "<think> look it up </think>\n<search> Eiffel Tower </search>"
            key = context.split("Question ")[-1].split("?")[0]
            first = key not in self.seen
            self.seen.add(key)
            return "<answer> A1 </answer>" if first else "<answer> A2 </answer>"

    script = SecondTry()
    summary = evaluate(config, gold, tmp_path / "right", resources(script))
    actor = summary["actor"]
    assert actor["em"]["mean"] == 0.0 and summary["overall"]["em"]["mean"] == 1.0
    gain = actor["refinement_gain_em"]
    assert gain["diff"] == 1.0 and gain["wins"] == 4 and gain["losses"] == 0
    row = json.loads((tmp_path / "right" / "samples.jsonl").read_text().splitlines()[0])
    assert row["actor_prediction"] == "A1" and row["prediction"] == "A2"
    assert row["actor_em"] == 0.0 and row["em"] == 1.0 and row["revised"] is True
