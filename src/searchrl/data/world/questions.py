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


def hop_facts(chain: Chain) -> set[tuple[int, str]]:
    """(subject entity, relation) of every hop: the facts a transcript of the chain states."""
    return {(e, r.name) for e, r in zip(chain.entities, chain.relations, strict=False)}


class _Draw:
    """Draws distinct chains: no (start, relations) walk twice, none using a `banned` fact."""

    def __init__(self, entities: list[Entity], config: WorldConfig, rng: random.Random) -> None:
        self.entities, self.config, self.rng = entities, config, rng
        self.hop_counts = list(range(1, len(config.hop_weights) + 1))
        self.seen: set[tuple[int, tuple[str, ...]]] = set()
        self.banned: set[tuple[int, str]] = set()

    def chains(self, count: int, attempts: int, retries: int = 1) -> list[Chain]:
        """Up to `count` chains in `attempts` draws of a hop count; each draw samples up to
        `retries` walks of that count (more than one keeps `hop_weights` when a ban rejects
        long walks more often than short ones)."""
        out: list[Chain] = []
        for _ in range(attempts):
            if len(out) == count:
                break
            hops = self.rng.choices(self.hop_counts, weights=self.config.hop_weights)[0]
            for _ in range(retries):
                chain = sample_chain(self.entities, self.rng, hops)
                if chain is None or hop_facts(chain) & self.banned:
                    continue
                key = (chain.entities[0], tuple(r.name for r in chain.relations))
                if key not in self.seen:
                    self.seen.add(key)
                    out.append(chain)
                    break
        return out


def _too_few(found: int, asked: int, what: str) -> ValueError:
    return ValueError(
        f"the world supports only {found} distinct {what}, {asked} were asked for; "
        "raise num_entities or ask for fewer questions"
    )


def _draw_chains(
    entities: list[Entity], config: WorldConfig, rng: random.Random, sizes: dict[str, int]
) -> dict[str, list[Chain]]:
    """Chains per split. `shared`: one stream cut into train, dev, test (held-out questions may
    chain facts that training transcripts state). `disjoint`: held-out chains are drawn first
    (test, then dev) and no train chain uses any of their hop facts, so no reference the model
    is trained on states a fact a held-out question needs (the knowledge base stays shared:
    the corpus still holds every fact, to be searched for)."""
    draw = _Draw(entities, config, rng)
    total = sum(sizes.values())
    if config.held_out_facts == "shared":
        chains = draw.chains(total, total * 50)
        if len(chains) < total:
            raise _too_few(len(chains), total, "questions")
        out, offset = {}, 0
        for split, size in sizes.items():
            out[split], offset = chains[offset : offset + size], offset + size
        return out
    out = {}
    for split in ("test", "dev", "train"):
        train = split == "train"
        out[split] = draw.chains(sizes[split], sizes[split] * 50, retries=200 if train else 1)
        if len(out[split]) < sizes[split]:
            raise _too_few(len(out[split]), sizes[split], f"{split} questions")
        if split != "train":
            draw.banned.update(f for chain in out[split] for f in hop_facts(chain))
    return {split: out[split] for split in sizes}


def generate_questions(
    entities: list[Entity], config: WorldConfig, rng: random.Random, support: Support
) -> dict[str, list[Question]]:
    """Questions for each split, no (start, relations) walk asked twice across splits and, with
    `held_out_facts: disjoint` (the default), no hop fact of a held-out question chained by a
    train question. Each question's metadata lists, per hop, the passages stating that hop's
    fact (`support`), which is what lets the Search-R2 oracle judge tell a useful search from a
    useless one."""
    counts = (config.train_questions, config.dev_questions, config.test_questions)
    sizes = dict(zip(SPLITS, counts, strict=True))
    chains = _draw_chains(entities, config, rng, sizes)
    out: dict[str, list[Question]] = {}
    for split in SPLITS:
        out[split] = []
        for i, chain in enumerate(chains[split]):
            text = phrase_question(chain, entities, rng, config.phrasing_variety)
            out[split].append(_question(chain, text, entities, split, i, support))
    return out
