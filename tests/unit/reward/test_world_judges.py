"""The oracle and rule judges on a tiny generated world whose supporting passages are known,
and the local judge on a tiny random model through the real generation backend."""

from __future__ import annotations

import pytest

from searchrl.config.data import WorldConfig
from searchrl.data.templates import format_information
from searchrl.data.world import generate_world, solve
from searchrl.models.hf_backend import HFBackend
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.reward.judges import (
    Collection,
    JudgeError,
    JudgeRequest,
    LocalJudge,
    OracleJudge,
    RuleJudge,
)
from searchrl.reward.judges.symbolic import needed_entities, world_support
from searchrl.types import Question


@pytest.fixture(scope="module")
def world():  # type: ignore[no-untyped-def]
    config = WorldConfig(
        num_entities=80, train_questions=40, dev_questions=4, test_questions=4, seed=3
    )
    return generate_world(config)


def multi_hop(world) -> Question:  # type: ignore[no-untyped-def]
    """A question of two or more hops whose first two hops are stated in different passages."""
    return next(
        q
        for q in world.questions["train"]
        if (q.hops or 0) >= 2 and not set(q.metadata["support"][0]) & set(q.metadata["support"][1])
    )


def request(world, q: Question, docs: list[list[str]]) -> JudgeRequest:  # type: ignore[no-untyped-def]
    by_id = {p.document.id: p.document.contents for p in world.passages}
    collections = tuple(
        Collection(tuple(ids), format_information([by_id[i] for i in ids])) for ids in docs
    )
    return JudgeRequest(
        q.question, q.golden_answers, collections, world_support(q.metadata),
        needed_entities(q.metadata),
    )  # fmt: skip


def test_world_questions_name_the_passages_stating_each_hop(world) -> None:  # type: ignore[no-untyped-def]
    by_id = {p.document.id: p for p in world.passages}
    titles = {e.id: e.title for e in world.entities}
    for q in world.questions["train"]:
        support = q.metadata["support"]
        assert len(support) == q.hops and all(support)
        for hop, ids in enumerate(support):
            for doc_id in ids:
                facts = by_id[doc_id].facts
                relation = q.metadata["relations"][hop]
                assert any(titles[s] == q.metadata["path"][hop] and r == relation for s, r in facts)


def test_oracle_marks_new_hops_useful_and_repeats_namesakes_and_noise_not(world) -> None:  # type: ignore[no-untyped-def]
    q = multi_hop(world)
    hop1, hop2 = q.metadata["support"][0][0], q.metadata["support"][1][0]
    needed = {i for hop in q.metadata["support"] for i in hop}
    noise = next(p.document.id for p in world.passages if p.document.id not in needed)
    docs = [[noise], [hop1, noise], [hop1], [noise, hop2]]
    judgment = OracleJudge().judge([request(world, q, docs)])[0]
    assert judgment.useful == (False, True, False, True) and judgment.count == 2


def test_oracle_finds_every_search_of_a_solved_reference_useful(world) -> None:  # type: ignore[no-untyped-def]
    retriever = BM25Retriever.build(world.documents)
    questions = world.questions["train"][:20]
    solved = 0
    for q, ref in zip(questions, solve(questions, retriever, k=3), strict=True):
        if ref.em < 1:
            continue
        solved += 1
        hits = retriever.search(
            [s["text"].split("<search>")[1].split("</search>")[0].strip()
             for s in ref.segments if "<search>" in s["text"]], 3,
        )  # fmt: skip
        docs = [[h.document.id for h in row] for row in hits]
        judgment = OracleJudge().judge([request(world, q, docs)])[0]
        assert judgment.useful is not None and judgment.useful[0]
        returned = {i for row in docs for i in row}
        assert all(returned & set(hop) for hop in q.metadata["support"])  # every hop found
        # a later search is useful exactly when it brings a hop no earlier one covered (the
        # founder's page may already state the founder's spouse: the second search is then
        # redundant although the solver needed it to know the name)
        assert judgment.count <= q.hops
    assert solved >= 10


def test_oracle_refuses_questions_without_support() -> None:
    plain = JudgeRequest("Who?", ("x",), (Collection(("1",), "text"),))
    with pytest.raises(JudgeError, match="supporting passages"):
        OracleJudge().judge([plain])


def test_rule_uses_gold_and_chain_entities_minus_what_was_already_named(world) -> None:  # type: ignore[no-untyped-def]
    q = multi_hop(world)
    hop1 = q.metadata["support"][0][0]
    needed = {i for hop in q.metadata["support"] for i in hop}
    noise = next(
        p.document.id
        for p in world.passages
        if p.document.id not in needed
        and not any(n.lower() in p.document.contents.lower() for n in needed_entities(q.metadata))
    )
    judgment = RuleJudge().judge([request(world, q, [[noise], [hop1], [hop1]])])[0]
    assert judgment.useful == (False, True, False)
    gold_only = JudgeRequest(
        "Capital?", ("Paris",), (Collection((), "Paris, France"), Collection((), "Lyon"))
    )
    assert RuleJudge().judge([gold_only])[0].useful == (True, False)


def test_local_judge_runs_the_prompt_on_a_real_model_and_counts_gibberish(tokenizer, tiny) -> None:  # type: ignore[no-untyped-def]
    backend = HFBackend(tiny, tokenizer, max_batch_size=4)
    judge = LocalJudge(backend, tokenizer, max_tokens=6)
    requests = [
        JudgeRequest("Capital?", ("Paris",), (Collection(("1",), "Paris is the capital."),)),
        JudgeRequest("River?", ("Rhone",), (Collection(("2",), "Lyon"), Collection((), ""))),
    ]
    judgments = judge.judge(requests)
    assert len(judgments) == 2
    assert all(j.count is None and j.error.startswith("malformed:") for j in judgments)
