"""Held-out questions whose hop facts no training transcript states (`held_out_facts`)."""

from __future__ import annotations

from dataclasses import replace

from searchrl.config.data import world_preset
from searchrl.data.world import generate_world
from searchrl.data.world.leakage import leakage, question_facts
from searchrl.data.world.questions import hop_facts, sample_chain


def test_disjoint_worlds_state_no_held_out_fact_in_training() -> None:
    world = generate_world(world_preset("test"))
    train = world.questions["train"]
    for split in ("dev", "test"):
        measured = leakage(world.questions[split], train)
        assert measured["hop_facts_stated"] == 0.0, (split, measured)
    held = {f for s in ("dev", "test") for q in world.questions[s] for f in question_facts(q)}
    assert not held & {f for q in train for f in question_facts(q)}


def test_shared_worlds_leak_and_the_measure_sees_it() -> None:
    world = generate_world(replace(world_preset("test"), held_out_facts="shared"))
    measured = leakage(world.questions["test"], world.questions["train"])
    assert measured["questions_any_hop_stated"] > 0.3, measured
    assert 0 < measured["questions_all_hops_stated"] <= measured["questions_any_hop_stated"]


def test_the_ban_keeps_the_train_hop_mix() -> None:
    """Long walks hit a banned fact more often; retrying the drawn hop count keeps the mix."""
    world = generate_world(replace(world_preset("test"), train_questions=200))
    counts = [sum(q.hops == h for q in world.questions["train"]) for h in (1, 2, 3, 4)]
    assert min(counts) >= 0.15 * sum(counts), counts


def test_hop_facts_name_each_hop_subject() -> None:
    import random

    world = generate_world(world_preset("test"))
    rng = random.Random(3)
    chain = None
    while chain is None:
        chain = sample_chain(world.entities, rng, 3)
    facts = hop_facts(chain)
    assert len(facts) == 3
    assert {e for e, _ in facts} == set(chain.entities[:3])
