"""Entities written as Wikipedia-like passages in the wiki-18 corpus format.

An entity's facts are spread over several short passages (like the sections of an article),
so a search has to land on the right one. Each passage records the strings it states on
purpose, which lets a test prove that no answer leaks into a passage by accident.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from searchrl.config.data import WorldConfig
from searchrl.data.world.entities import Entity
from searchrl.data.world.schema import FILLERS, INVERSE_SENTENCES, PERSON, relations_of
from searchrl.types import Document

_FULL_NAME = "{p} full name is {o}."
_POSSESSIVE = {"He": "His", "She": "Her", "It": "Its"}


@dataclass(frozen=True)
class Passage:
    """A corpus passage and what the generator meant it to say."""

    document: Document
    entity: int
    """Index of the entity the passage is about."""
    mentions: tuple[str, ...]
    """Every name or value the passage states on purpose (sorted)."""
    distractor: bool
    """True for passages of namesakes and near-duplicate twins."""
    facts: tuple[tuple[int, str], ...] = ()
    """(subject entity index, relation name) of every relation fact the passage states,
    back-links included: what the Search-R2 oracle judge counts as support for a hop."""


@dataclass(frozen=True)
class _Sentence:
    template: str
    values: dict[str, str]
    mentions: tuple[str, ...]
    fact: tuple[int, str] | None = None


def _mentioned(entity: Entity) -> tuple[str, ...]:
    """What naming `entity` in a sentence puts into the text."""
    extra = (entity.subkind,) if entity.disambiguated else ()
    return (*entity.answers, entity.mention, *extra)


def _fact_sentences(
    entity: Entity, entities: list[Entity], rng: random.Random, variety: int
) -> list[_Sentence]:
    sentences = []
    for rel in relations_of(entity.kind):
        template = rel.sentences[rng.randrange(min(variety, len(rel.sentences)))]
        if rel.name in entity.links:
            other = entities[entity.links[rel.name]]
            sentences.append(
                _Sentence(template, {"o": other.mention}, _mentioned(other), (entity.id, rel.name))
            )
        elif rel.name in entity.values:
            value = entity.values[rel.name]
            sentences.append(_Sentence(template, {"o": value}, (value,), (entity.id, rel.name)))
    if entity.kind == PERSON and entity.aliases:
        sentences.append(_Sentence(_FULL_NAME, {"o": entity.aliases[0]}, entity.aliases))
    return sentences


def _back_links(entity: Entity, entities: list[Entity], sources: list[int]) -> list[_Sentence]:
    """Sentences naming the entities that point at `entity` (a founder's page names the
    organisation), as real articles link both ways."""
    sentences = []
    for source in sources:
        other = entities[source]
        for rel_name, target in other.links.items():
            if target == entity.id and rel_name in INVERSE_SENTENCES:
                template = INVERSE_SENTENCES[rel_name]
                fact = (other.id, rel_name)
                sentences.append(_Sentence(template, {"x": other.mention}, _mentioned(other), fact))
    return sentences


def _render(sentence: _Sentence, entity: Entity, first: bool) -> str:
    """Fill a template; a sentence that opens with the subject uses a pronoun unless it
    opens its passage, so passages read like prose yet each names its entity."""
    use_pronoun = not first and sentence.template.startswith("{s} ")
    subject = entity.pronoun if use_pronoun else entity.name
    possessive = _POSSESSIVE[entity.pronoun]
    text = sentence.template.format(s=subject, p=possessive, **sentence.values)
    return text[0].upper() + text[1:]


def entity_passages(
    entity: Entity,
    entities: list[Entity],
    back_links: list[int],
    rng: random.Random,
    config: WorldConfig,
) -> list[tuple[str, str, tuple[str, ...], tuple[tuple[int, str], ...]]]:
    """(title, text, mentions, facts) of each passage about `entity`."""
    sentences = _fact_sentences(entity, entities, rng, config.phrasing_variety)
    sentences += _back_links(entity, entities, back_links)
    fillers = FILLERS[entity.kind]
    sentences += [_Sentence(rng.choice(fillers), {}, ()) for _ in range(config.filler_sentences)]
    head, tail = sentences[:1], sentences[1:]
    rng.shuffle(tail)
    sentences = head + tail
    size = max(1, config.sentences_per_passage)
    own = _mentioned(entity)
    chunks = []
    for start in range(0, len(sentences), size):
        chunk = sentences[start : start + size]
        text = " ".join(_render(s, entity, i == 0) for i, s in enumerate(chunk))
        mentions = tuple(sorted({*own, *(m for s in chunk for m in s.mentions)}))
        facts = tuple(s.fact for s in chunk if s.fact is not None)
        chunks.append((entity.title, text, mentions, facts))
    return chunks


def write_passages(
    entities: list[Entity], config: WorldConfig, rng: random.Random
) -> Iterator[Passage]:
    """Every passage of the world, entity by entity; ids are "0", "1", … in order."""
    pointing: dict[int, list[int]] = {}
    for e in entities:
        for target in e.links.values():
            pointing.setdefault(target, []).append(e.id)
    next_id = 0
    for entity in entities:
        distractor = entity.twin_of is not None or entity.disambiguated
        for title, text, mentions, facts in entity_passages(
            entity, entities, pointing.get(entity.id, []), rng, config
        ):
            contents = f'"{title}"\n{text}'
            document = Document(str(next_id), contents)
            yield Passage(document, entity.id, mentions, distractor, facts)
            next_id += 1
