"""Invented entities and the relations between them.

Names come from syllable generators, so no pretrained model has seen them and no answer can
be recalled instead of searched. Every invented word is used by one entity only (namesakes
excepted, on purpose), so an answer string occurs only where a fact puts it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from searchrl.config.data import WorldConfig
from searchrl.data.world.schema import (
    CITY,
    COUNTRY,
    ENTITY_KINDS,
    FILLERS,
    OCCUPATIONS,
    ORG,
    ORG_KINDS,
    PERSON,
    RELATIONS,
    WORK,
    WORK_KINDS,
    WORK_NOUNS,
)

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "tr", "th", "sh", "st", "vr", "zh")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "sk", "nd", "rn")
_FIRST_NAMES = 160


@dataclass
class Entity:
    """One thing of the world. `links` map a relation to another entity's index, `values`
    map a relation to a literal (a year, an occupation, a currency name)."""

    id: int
    kind: str
    name: str
    subkind: str
    aliases: tuple[str, ...] = ()
    links: dict[str, int] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    pronoun: str = "It"
    twin_of: int | None = None
    disambiguated: bool = False

    @property
    def title(self) -> str:
        """Passage title; namesakes carry their occupation, as Wikipedia disambiguates."""
        return f"{self.name} ({self.subkind})" if self.disambiguated else self.name

    @property
    def mention(self) -> str:
        """How other passages and questions refer to this entity."""
        return f"the {self.subkind} {self.name}" if self.disambiguated else self.name

    @property
    def answers(self) -> tuple[str, ...]:
        """Strings that count as naming this entity (the gold answer and its aliases)."""
        return tuple(dict.fromkeys((self.name, self.title, *self.aliases)))


class NameMaker:
    """Invented words that never repeat and never equal a word of the templates."""

    def __init__(self, rng: random.Random, reserved: set[str]) -> None:
        self._rng = rng
        self._used = set(reserved)
        self._syllables = 2

    def word(self) -> str:
        """A fresh capitalised word. When short words run out (50 collisions in a row) every
        later word gets one more syllable, so a million names cost linear time."""
        while True:
            for _attempt in range(50):
                parts = [
                    self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS)
                    for _ in range(self._syllables)
                ]
                parts[-1] += self._rng.choice(_CODAS)
                word = "".join(parts).capitalize()
                if word.lower() not in self._used:
                    self._used.add(word.lower())
                    return word
            self._syllables += 1

    def variant(self, word: str) -> str:
        """A near-duplicate of `word`: the last syllable replaced, still never used before."""
        stem = word[: max(2, len(word) - 3)]
        for _ in range(200):
            candidate = stem + self._rng.choice(_VOWELS) + self._rng.choice((*_CODAS, "n", "r"))
            if candidate.lower() not in self._used:
                self._used.add(candidate.lower())
                return candidate
        return self.word()


def reserved_words() -> set[str]:
    """Lower-cased words of every template and pool: invented names must differ from them."""
    texts = [*OCCUPATIONS, *ORG_KINDS, *WORK_KINDS, *WORK_NOUNS]
    for rel in RELATIONS:
        texts += [*rel.sentences, *rel.phrases, *rel.questions]
    texts += [s for group in FILLERS.values() for s in group]
    return {w.strip("{}.,?'").lower() for text in texts for w in text.split()}


def _counts(config: WorldConfig) -> dict[str, int]:
    shares = dict(zip((PERSON, CITY, COUNTRY, ORG, WORK), config.kind_shares, strict=True))
    total = sum(shares.values())
    return {k: max(2, round(config.num_entities * s / total)) for k, s in shares.items()}


def _new_entity(
    kind: str, index: int, names: NameMaker, rng: random.Random, firsts: list[str]
) -> Entity:
    if kind == PERSON:
        first, middle, last = rng.choice(firsts), rng.choice(firsts), names.word()
        return Entity(
            index, kind, f"{first} {last}", rng.choice(OCCUPATIONS),
            aliases=(f"{first} {middle} {last}",), pronoun=rng.choice(("He", "She")),
        )  # fmt: skip
    if kind == ORG:
        return Entity(index, kind, f"{names.word()} {rng.choice(ORG_KINDS)}", "organisation")
    if kind == WORK:
        word, noun = names.word(), rng.choice(WORK_NOUNS)
        title = rng.choice((f"The {word} {noun}", f"{noun} of {word}", f"The {noun} of {word}"))
        return Entity(index, kind, title, rng.choice(WORK_KINDS))
    return Entity(index, kind, names.word(), kind)


def _link(entities: list[Entity], rng: random.Random, names: NameMaker) -> None:
    """Fill links and values of every entity that has none yet; years stay plausible
    (a founder is born before the organisation is founded)."""
    by_kind: dict[str, list[int]] = {k: [] for k in ENTITY_KINDS}
    for e in entities:
        if e.twin_of is None:
            by_kind[e.kind].append(e.id)
    for e in entities:
        if e.links or e.values:
            continue
        if e.kind == PERSON:
            e.values = {"occupation": e.subkind, "birth_year": str(rng.randint(1820, 1960))}
            e.links = {
                "birthplace": rng.choice(by_kind[CITY]),
                "employer": rng.choice(by_kind[ORG]),
            }
        elif e.kind == CITY:
            e.values = {"city_founding_year": str(rng.randint(1000, 1800))}
            e.links = {"country": rng.choice(by_kind[COUNTRY])}
        elif e.kind == COUNTRY:
            e.values = {"currency": names.word()}
        elif e.kind == ORG:
            founder = entities[rng.choice(by_kind[PERSON])]
            born = int(founder.values.get("birth_year", "1900"))
            e.links = {"founder": founder.id, "headquarters": rng.choice(by_kind[CITY])}
            e.values = {"founding_year": str(born + rng.randint(20, 50))}
        else:
            creator = entities[rng.choice(by_kind[PERSON])]
            born = int(creator.values.get("birth_year", "1900"))
            e.links = {"creator": creator.id, "publisher": rng.choice(by_kind[ORG])}
            e.values = {"release_year": str(born + rng.randint(18, 60))}
    cities_of: dict[int, list[int]] = {}
    for city in (e for e in entities if e.kind == CITY):
        cities_of.setdefault(city.links["country"], []).append(city.id)
    for country in (e for e in entities if e.kind == COUNTRY and "capital" not in e.links):
        if country.id in cities_of:
            country.links["capital"] = rng.choice(cities_of[country.id])


def _marry(entities: list[Entity], rng: random.Random, rate: float) -> None:
    people = [e for e in entities if e.kind == PERSON]
    rng.shuffle(people)
    couples = int(len(people) * rate) // 2
    for a, b in zip(people[:couples], people[couples : 2 * couples], strict=True):
        a.links["spouse"], b.links["spouse"] = b.id, a.id


def _add_distractors(
    entities: list[Entity], rng: random.Random, config: WorldConfig, names: NameMaker
) -> None:
    """Namesakes (same name, other occupation) and near-duplicate twins (one syllable off)."""
    people = [e for e in entities if e.kind == PERSON]
    for original in rng.sample(people, int(len(people) * config.same_name_rate)):
        other = rng.choice([o for o in OCCUPATIONS if o != original.subkind])
        twin = Entity(
            len(entities), PERSON, original.name, other, pronoun=rng.choice(("He", "She")),
            twin_of=original.id, disambiguated=True,
        )  # fmt: skip
        original.disambiguated = True
        entities.append(twin)
    candidates = [e for e in entities if e.twin_of is None and not e.disambiguated]
    for original in rng.sample(candidates, int(len(candidates) * config.near_duplicate_rate)):
        words = original.name.split()
        pos = _invented_word_index(original.kind, words)
        words[pos] = names.variant(words[pos])
        entities.append(
            Entity(len(entities), original.kind, " ".join(words), original.subkind,
                   pronoun=original.pronoun, twin_of=original.id)
        )  # fmt: skip


def _invented_word_index(kind: str, words: list[str]) -> int:
    """Position of the entity's own invented word (not a shared first name or noun)."""
    if kind == PERSON:
        return len(words) - 1
    common = {*WORK_NOUNS, *ORG_KINDS, "The", "of"}
    return next(i for i, w in enumerate(words) if w not in common)


def generate_entities(config: WorldConfig, rng: random.Random) -> list[Entity]:
    """All entities of the world, linked; index in the list == `Entity.id`."""
    names = NameMaker(rng, reserved_words())
    firsts = [names.word() for _ in range(_FIRST_NAMES)]
    entities: list[Entity] = []
    for kind, count in _counts(config).items():
        for _ in range(count):
            entities.append(_new_entity(kind, len(entities), names, rng, firsts))
    _link(entities, rng, names)
    _add_distractors(entities, rng, config, names)
    _link(entities, rng, names)
    _marry(entities, rng, config.spouse_rate)
    return entities
