"""World-labelled Meta-Refiner data: references corrupted at a known step (no template
giveaway, flaws at every step, labels the oracle agrees with), the oracle's labels of a
trajectory, the meta examples the warm start trains on, and the accuracy report."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.config.data import world_preset
from searchrl.data.templates import format_information
from searchrl.data.world import Reference, generate_world, load_references, write_world
from searchrl.data.world.corrupt import Corrupter, policy_steps
from searchrl.refiner.labelled import (
    confidence_accuracy,
    label_accuracy,
    meta_example,
    oracle_flaw,
    roc_auc,
)
from searchrl.refiner.meta import Reading
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.reward.judges.symbolic import world_support
from searchrl.reward.metrics import answer_metrics
from searchrl.rollout.parse import parse_action
from searchrl.train.collate import collate
from searchrl.train.meta_sft import balance, labelled_references
from searchrl.train.sft import reference_trajectory
from searchrl.types import Question, SearchCall, Trajectory

World = tuple[list[Reference], list[Question], BM25Retriever]
_LAST = re.compile(r"^<think> [^<]* No steps left\. </think>\n<answer> [^<]+ </answer>$")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = generate_world(world_preset("test"))
    retriever = BM25Retriever.build(world.documents)
    out: Path = tmp_path_factory.mktemp("world")
    write_world(world, out, retriever)
    refs = [r for r in load_references(out / "references_train.jsonl") if r.em == 1.0]
    return refs, world.questions["train"], retriever


def replayed(ref: Reference, question: Question, retriever: BM25Retriever) -> Trajectory:
    """A reference as a rollout would record it: every query searched again for its doc ids
    (the retriever is deterministic, so they are the passages the transcript shows)."""
    traj = Trajectory(id=ref.id, question=ref.question, golden_answers=list(ref.golden_answers))
    traj.uid = question.uid
    for segment in ref.segments:
        traj.append(segment["role"], segment["text"], [0])  # type: ignore[arg-type]
        action = parse_action(segment["text"])
        if segment["role"] == "policy" and action.kind == "search":
            (hits,) = retriever.search([action.content], 3)
            turn = sum(s.role == "policy" for s in traj.segments)
            traj.searches.append(SearchCall(action.content, [h.document.id for h in hits], turn))
            shown = format_information([h.document.contents for h in hits])
            assert shown in "".join(s["text"] for s in ref.segments)
        if action.kind == "answer":
            traj.answer = action.content
    traj.metrics = answer_metrics(traj.answer, traj.golden_answers)
    return traj


def test_corruption_has_no_template_giveaway_and_the_oracle_agrees(world: World) -> None:
    refs, questions, retriever = world
    by_id = {q.uid.partition(":")[2]: q for q in questions}
    corrupter = Corrupter(questions, retriever)
    rng = random.Random(0)
    positions: Counter[tuple[int, int]] = Counter()
    for ref in refs[:60]:
        question = by_id[ref.id]
        steps = policy_steps(ref)
        assert (
            oracle_flaw(replayed(ref, question, retriever), world_support(question.metadata)) == 0
        )
        for k in range(1, len(steps) + 1):
            result = corrupter.corrupt(ref, rng, step=k)
            if result is None:
                continue
            bad, label = result
            positions[(len(steps), label)] += 1
            assert label == k and bad.em == 0.0 and bad.answer != ref.answer
            keep = steps[k - 1]
            assert bad.segments[:keep] == ref.segments[:keep]  # steps before k untouched
            assert bad.segments[keep] != ref.segments[keep]  # step k is the flaw
            # same length and the same final template as a clean transcript
            assert len(policy_steps(bad)) == len(steps)
            assert _LAST.match(bad.segments[-1]["text"]), bad.segments[-1]["text"]
            assert "So the answer is" not in "".join(s["text"] for s in bad.segments)
            found = oracle_flaw(
                replayed(bad, question, retriever), world_support(question.metadata)
            )
            assert found == k
    # every position of every length occurs, last and second to last included
    longest = max(t for t, _ in positions)
    assert longest >= 4
    assert {k for t, k in positions if t == longest} == set(range(1, longest + 1))


def _traj(actions: list[str], docs: list[list[str]], em: float) -> Trajectory:
    traj = Trajectory(id="t", question="q", golden_answers=["a"])
    for turn, action in enumerate(actions, start=1):
        traj.append("policy", action, [1])
        if "<search>" in action:
            traj.searches.append(SearchCall("q", docs[len(traj.searches)], turn))
            traj.append("env", "<information>…</information>", [2])
    traj.metrics = {"em": em}
    return traj


SEARCH, ANSWER = "<search> x </search>", "<answer> a </answer>"


@pytest.mark.parametrize(
    ("actions", "docs", "em", "label"),
    [
        ([SEARCH, SEARCH, ANSWER], [["1"], ["2"]], 1.0, 0),  # both hops found, right
        ([SEARCH, SEARCH, ANSWER], [["1"], ["2"]], 0.0, 3),  # found, then misread
        ([SEARCH, SEARCH, ANSWER], [["9"], ["2"]], 0.0, 1),  # missed hop 1 first
        ([SEARCH, SEARCH, ANSWER], [["1", "5"], ["1"]], 0.0, 2),  # hop 1 again: missed hop 2
        ([SEARCH, SEARCH, ANSWER], [["1", "2"], ["2"]], 1.0, 0),  # hop 2 came early, found again
        ([SEARCH, SEARCH, SEARCH, ANSWER], [["1"], ["2"], ["2"]], 1.0, 3),  # after the last hop
        ([SEARCH, SEARCH, SEARCH, ANSWER], [["1"], ["1"], ["2"]], 1.0, 2),  # right, one wasted
        (["no action", SEARCH, ANSWER], [["1"]], 0.0, 1),  # invalid action
        ([ANSWER], [], 1.0, 0),  # right without searching
        ([SEARCH, SEARCH], [["1"], ["2"]], 0.0, 2),  # never answered
    ],
)
def test_oracle_labels_by_hand(
    actions: list[str], docs: list[list[str]], em: float, label: int
) -> None:
    assert oracle_flaw(_traj(actions, docs, em), [["1", "5"], ["2"]]) == label


def test_labelled_references_and_meta_examples(
    world: World, tokenizer: PreTrainedTokenizerBase
) -> None:
    refs, questions, retriever = world
    labelled = labelled_references(refs, questions, 40, 0.5, seed=1, retriever=retriever)
    assert len(labelled) == 40 and sum(label == 0 for _, label in labelled) == 20
    relative = {label / len(policy_steps(ref)) for ref, label in labelled if label}
    assert len(relative) >= 4  # flaws spread over the steps
    examples = [
        meta_example(tokenizer, reference_trajectory(r, tokenizer, True), label)
        for r, label in labelled
    ]
    for (ref, label), example in zip(labelled, examples, strict=True):
        (segment,) = example.segments
        assert segment.role == "meta"
        assert segment.token_ids == [
            *tokenizer.encode(str(label), add_special_tokens=False),
            tokenizer.eos_token_id,
        ]
        assert f"between 0 and {len(policy_steps(ref))} where" in example.prompt
    batch = collate(examples[:3], 0, include_meta=True)
    assert batch.policy_mask.sum(-1).tolist() == [2, 2, 2]  # only the answer is trained on
    with pytest.raises(ValueError, match="outside"):
        meta_example(tokenizer, examples[0], 99)


def test_balance_keeps_as_many_clean_as_flawed() -> None:
    items = [("c", 0)] * 7 + [("f", 1), ("f", 2), ("f", 3)]
    out = balance(items, seed=0)
    assert sorted(y for _, y in out) == [0, 0, 0, 1, 2, 3]
    assert out == balance(items, seed=0)


def _reading(probs: list[float], prior: float = 0.0) -> Reading:
    logp = [math.log(p) for p in probs]
    return Reading("p", [1], [[k] for k in range(len(probs))], logp, prior)


def test_label_accuracy_by_hand() -> None:
    readings = [
        _reading([0.7, 0.2, 0.1]),  # accept; label 0 → right
        _reading([0.1, 0.2, 0.7]),  # revise at 2; label 2 → right, exact
        _reading([0.2, 0.5, 0.3]),  # revise at 1; label 2 → right, not exact
        _reading([0.3, 0.3, 0.4]),  # revise; label 0 → wrong
        None,
    ]
    acc = label_accuracy(readings, [0, 2, 2, 0, 1], 0.0)
    assert acc["meta/discriminator_accuracy"] == 0.75 and acc["meta/labelled"] == 4
    assert acc["meta/discriminator_recall"] == 1.0
    assert acc["meta/discriminator_specificity"] == 0.5
    assert acc["meta/trimmer_exact_step"] == 0.5
    assert acc["meta/trimmer_last_step"] == 1.0 and acc["meta/trimmer_first_step"] == 0.0
    assert acc["meta/trimmer_best_constant"] == 1.0  # both flaws at step 2
    mixed = label_accuracy([_reading([0.1, 0.2, 0.7])] * 3, [1, 2, 2], 0.0)
    assert mixed["meta/trimmer_best_constant"] == pytest.approx(2 / 3)
    # every flawed reading scores above every clean one: a perfect ranking, τ = 0 too low
    assert acc["meta/roc_auc"] == 1.0
    assert acc["meta/revision_rate"] == 0.75
    # revising the 2 highest scores (the flawed share) needs τ at the 2nd lowest score
    assert acc["meta/tau_for_flawed_share"] == pytest.approx(math.log(0.7 / 0.3))
    assert math.isnan(acc["meta/trimmer_exact_step_surprisal"])  # no reading was tilted
    tilted = [replace(r, tilt=(0.0, -5.0)) if r is not None else r for r in readings]
    both = label_accuracy(tilted, [0, 2, 2, 0, 1], 0.0)
    assert both["meta/trimmer_exact_step"] == 0.5  # the paper's π_h, the tilt ignored
    assert both["meta/trimmer_exact_step_surprisal"] == 0.0  # tilted: both cut at step 1
    shifted = label_accuracy([_reading([0.3, 0.3, 0.4], prior=5.0)], [1], 0.0)
    assert shifted["meta/discriminator_recall"] == 0.0  # the prior is subtracted first


def test_roc_auc_by_hand() -> None:
    assert roc_auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert roc_auc([0.1, 0.8, 0.9, 0.2], [True, True, False, False]) == 0.25
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5  # ties count half
    assert math.isnan(roc_auc([0.5], [True]))


def test_confidence_accuracy_by_hand() -> None:
    """The Actor's surprisal read against labels: ROC-AUC, the threshold that revises the
    flawed share, medians; the passages' tokens never count; references (no log-probs) give
    nothing rather than a fake score."""

    def sampled(logprob: float) -> Trajectory:
        traj = _traj([SEARCH, ANSWER], [["1"]], 1.0)
        for segment in traj.segments:
            if segment.role == "policy":
                segment.logprobs = [logprob]
            else:
                segment.logprobs = [-50.0]  # not the Actor's: must be ignored
        return traj

    trajs = [sampled(v) for v in (-0.01, -0.02, -0.40, -0.03, -0.90)]
    labels = [0, 0, 2, 0, 1]
    found = confidence_accuracy(trajs, labels)
    assert found["meta/confidence/roc_auc"] == 1.0
    threshold = found["meta/confidence/threshold_for_flawed_share"]
    assert threshold == pytest.approx(0.03)
    assert found["meta/confidence/median_clean"] == pytest.approx(0.02)
    assert found["meta/confidence/median_flawed"] == pytest.approx(0.65)
    assert confidence_accuracy(trajs, [2, 0, 0, 0, 1])["meta/confidence/roc_auc"] == 0.5
    assert confidence_accuracy([_traj([SEARCH, ANSWER], [["1"]], 1.0)], [0]) == {}
