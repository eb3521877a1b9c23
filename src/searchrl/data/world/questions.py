"""Multi-hop questions: walks along relations, written as nested noun phrases.

A question of h hops names one entity and asks for the end of a chain of h relations, e.g.
"In which city was the founder of the organisation that released The Velmora Tide born?"
(publisher → founder → birthplace: three hops, three searches). A chain never revisits an
entity, so the answer is never an entity the question already names.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from searchrl.config.data import WorldConfig
from searchrl.data.world.entities import Entity
from searchrl.data.world.schema import Relation, relations_of
from searchrl.types import Question

SPLITS = ("train", "dev", "test")
SOURCE = "world"


@dataclass(frozen=True)
class Chain:
    """A walk: the start entity, the relations followed, the entities visited, the answers."""

    relations: tuple[Relation, ...]
    entities: tuple[int, ...]
    answers: tuple[str, ...]


def _step_options(entity: Entity, visited: set[int], final: bool) -> list[Relation]:
    options = []
    for rel in relations_of(entity.kind):
        unvisited_link = rel.name in entity.links and entity.links[rel.name] not in visited
        if unvisited_link or (final and rel.name in entity.values):
            options.append(rel)
    return options


def sample_chain(entities: list[Entity], rng: random.Random, hops: int) -> Chain | None:
    """A random walk of `hops` relations from a random entity, or None if it got stuck."""
    current = entities[rng.randrange(len(entities))]
    visited, path, rels = {current.id}, [current.id], []
    for step in range(hops):
        options = _step_options(current, visited, final=step == hops - 1)
        if not options:
            return None
        rel = rng.choice(options)
        rels.append(rel)
        if rel.name in current.values and step == hops - 1:
            return Chain(tuple(rels), tuple(path), (current.values[rel.name],))
        current = entities[current.links[rel.name]]
        visited.add(current.id)
        path.append(current.id)
    return Chain(tuple(rels), tuple(path), current.answers)


def phrase_question(chain: Chain, entities: list[Entity], rng: random.Random, variety: int) -> str:
    """Nest the noun phrases of the inner relations, then ask the last one."""

    def pick(options: tuple[str, ...]) -> str:
        return options[rng.randrange(min(variety, len(options)))]

    x = entities[chain.entities[0]].mention
    for rel in chain.relations[:-1]:
        x = pick(rel.phrases).format(x=x)
    text = pick(chain.relations[-1].questions).format(x=x)
    return text[0].upper() + text[1:]


Support = dict[tuple[int, str], list[str]]
"""(subject entity index, relation name) → ids of the passages stating that fact."""


def _question(
    chain: Chain, text: str, entities: list[Entity], split: str, index: int, support: Support
) -> Question:
    start = entities[chain.entities[0]]
    metadata = {
        "split": split,
        "start": start.mention,
        "relations": [r.name for r in chain.relations],
        "path": [entities[i].title for i in chain.entities],
        "support": [
            support.get((subject, rel.name), [])
            for subject, rel in zip(chain.entities, chain.relations, strict=False)
        ],
    }
    qid = f"{split}_{index}"
    return Question(
        uid=f"{SOURCE}:{qid}",
        question=text,
        golden_answers=chain.answers,
        source=SOURCE,
        hops=len(chain.relations),
        metadata=metadata,
    )


def generate_questions(
    entities: list[Entity], config: WorldConfig, rng: random.Random, support: Support
) -> dict[str, list[Question]]:
    """Questions for each split, no (start, relations) walk asked twice across splits. Each
    question's metadata lists, per hop, the passages stating that hop's fact (`support`),
    which is what lets the Search-R2 oracle judge tell a useful search from a useless one."""
    counts = (config.train_questions, config.dev_questions, config.test_questions)
    sizes = dict(zip(SPLITS, counts, strict=True))
    total = sum(sizes.values())
    seen: set[tuple[int, tuple[str, ...]]] = set()
    chains: list[Chain] = []
    hop_counts = list(range(1, len(config.hop_weights) + 1))
    for _ in range(total * 50):
        if len(chains) == total:
            break
        hops = rng.choices(hop_counts, weights=config.hop_weights)[0]
        chain = sample_chain(entities, rng, hops)
        if chain is None:
            continue
        key = (chain.entities[0], tuple(r.name for r in chain.relations))
        if key not in seen:
            seen.add(key)
            chains.append(chain)
    if len(chains) < total:
        raise ValueError(
            f"the world supports only {len(chains)} distinct questions, {total} were asked for; "
            "raise num_entities or ask for fewer questions"
        )
    out: dict[str, list[Question]] = {}
    offset = 0
    for split, size in sizes.items():
        out[split] = []
        for i, chain in enumerate(chains[offset : offset + size]):
            text = phrase_question(chain, entities, rng, config.phrasing_variety)
            out[split].append(_question(chain, text, entities, split, i, support))
        offset += size
    return out
