"""World-labelled Meta-Refiner data: references corrupted at a known step, the meta examples
the warm start trains on, and the accuracy report against the labels."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.config.data import world_preset
from searchrl.data.world import Reference, generate_world, load_references, write_world
from searchrl.data.world.corrupt import corrupt, policy_steps
from searchrl.refiner.labelled import label_accuracy, meta_example
from searchrl.refiner.meta import Reading
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.train.collate import collate
from searchrl.train.sft import labelled_references, meta_sft_examples


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Reference], BM25Retriever]:
    world = generate_world(world_preset("test"))
    retriever = BM25Retriever.build(world.documents)
    out: Path = tmp_path_factory.mktemp("world")
    write_world(world, out, retriever)
    refs = [r for r in load_references(out / "references_train.jsonl") if r.em == 1.0]
    return refs, retriever


def test_corruption_marks_the_earliest_flawed_step(world: tuple) -> None:
    refs, retriever = world
    seen = set()
    rng = random.Random(0)
    for ref in refs[:40]:
        result = corrupt(ref, refs, rng, retriever)
        if result is None:
            assert len(policy_steps(ref)) == 1
            continue
        bad, k = result
        steps = policy_steps(bad)
        assert 1 <= k <= len(steps) and bad.em == 0.0 and bad.answer != ref.answer
        keep = policy_steps(ref)[k - 1]
        assert bad.segments[:keep] == ref.segments[:keep]  # steps before k untouched
        assert bad.segments[keep] != ref.segments[keep]  # step k is the flaw
        seen.add("misread" if k == len(policy_steps(ref)) and len(steps) == k else "distractor")
    assert seen == {"misread", "distractor"}


def test_labelled_references_and_meta_examples(
    world: tuple, tokenizer: PreTrainedTokenizerBase
) -> None:
    refs, retriever = world
    labelled = labelled_references(refs, 20, 0.5, seed=1, retriever=retriever)
    assert len(labelled) == 20 and sum(label == 0 for _, label in labelled) == 10
    examples = meta_sft_examples(labelled, tokenizer, use_chat_template=True)
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


def _reading(probs: list[float]) -> Reading:
    return Reading("p", [1], [[k] for k in range(len(probs))], [math.log(p) for p in probs])


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
