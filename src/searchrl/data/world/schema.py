"""The relations of the invented world and every way they are put into words.

One table drives the passage writer, the question writer and the scripted solver, so the
solver parses exactly the phrasings the writer can produce. The solver still has to find the
right passage with a real retriever and read the value out of its text; the table only tells
it what a fact looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

PERSON, CITY, COUNTRY, ORG, WORK = "person", "city", "country", "organisation", "work"
ENTITY_KINDS = (PERSON, CITY, COUNTRY, ORG, WORK)
YEAR, OCCUPATION, NAME = "year", "occupation", "name"

OCCUPATIONS = (
    "painter", "sculptor", "novelist", "poet", "composer", "singer", "physicist", "chemist",
    "botanist", "surgeon", "lawyer", "judge", "diplomat", "banker", "merchant", "sailor",
    "pilot", "engineer", "architect", "philosopher", "historian", "journalist", "dancer",
    "violinist", "cartographer", "mathematician", "geologist", "photographer", "playwright",
    "teacher",
)  # fmt: skip
ORG_KINDS = ("Press", "Records", "Studios", "Institute", "Company", "Foundation", "Society")
WORK_KINDS = ("novel", "film", "album", "play", "painting", "opera")
WORK_NOUNS = (
    "Tide", "Garden", "Letters", "Lantern", "Harbour", "Winter", "Orchard", "Mirror", "Bridge",
    "Voyage", "Crown", "Silence", "Ember", "Meadow", "Tower", "River", "Threshold", "Echo",
)  # fmt: skip
FILLERS = {
    PERSON: ("{s} was widely admired by colleagues.", "{s} travelled a great deal in youth."),
    CITY: ("{s} is known for its old market and narrow streets.", "{s} hosts a yearly fair."),
    COUNTRY: ("{s} has a long coastline and a mild climate.", "{s} is mostly hilly."),
    ORG: ("{s} has grown steadily over the decades.", "{s} keeps a small archive."),
    WORK: ("{s} received mixed reviews at first.", "{s} is still widely discussed."),
}


@dataclass(frozen=True)
class Relation:
    """One fact type: `subject` kind → `target` (an entity kind, or a value kind)."""

    name: str
    subject: str
    target: str
    keyword: str
    """Query word; it occurs in every sentence phrasing, so lexical search can find the fact."""
    sentences: tuple[str, ...]
    """Passage phrasings with `{s}` (subject) and `{o}` (object)."""
    phrases: tuple[str, ...]
    """Noun phrases for the object, `{x}` = the subject ("the founder of {x}")."""
    questions: tuple[str, ...]
    """Question phrasings asking for the object of `{x}`."""

    @property
    def links(self) -> bool:
        """True when the object is another entity (the relation can continue a chain)."""
        return self.target in ENTITY_KINDS


RELATIONS = (
    Relation(
        "occupation", PERSON, OCCUPATION, "occupation",
        ("{s} is a {o} by occupation.", "By occupation, {s} is a {o}."),
        ("the occupation of {x}",),
        ("What is the occupation of {x}?", "What did {x} do for a living, by occupation?"),
    ),
    Relation(
        "birth_year", PERSON, YEAR, "born",
        ("{s} was born in {o}.", "{s} was born in the year {o}."),
        ("the birth year of {x}",),
        ("In what year was {x} born?", "When was {x} born?"),
    ),
    Relation(
        "birthplace", PERSON, CITY, "birthplace",
        ("The birthplace of {s} is the city of {o}.", "The city of {o} is the birthplace of {s}."),
        ("the birthplace of {x}", "the city where {x} was born"),
        ("In which city was {x} born?", "What is the birthplace of {x}?"),
    ),
    Relation(
        "employer", PERSON, ORG, "employer",
        ("The employer of {s} was {o}.", "{o} was the employer of {s}."),
        ("the employer of {x}", "the organisation {x} worked for"),
        ("Which organisation did {x} work for?", "Who was the employer of {x}?"),
    ),
    Relation(
        "spouse", PERSON, PERSON, "married",
        ("{s} married {o}.", "{s} was married to {o}."),
        ("the spouse of {x}", "the person {x} married"),
        ("Who was {x} married to?", "Who is the spouse of {x}?"),
    ),
    Relation(
        "creator", WORK, PERSON, "created",
        ("{s} was created by {o}.", "{s} was created single-handedly by {o}."),
        ("the creator of {x}", "the person who created {x}"),
        ("Who created {x}?", "Who is the creator of {x}?"),
    ),
    Relation(
        "publisher", WORK, ORG, "publisher",
        ("The publisher of {s} is {o}.", "{o} is the publisher of {s}."),
        ("the organisation that released {x}", "the publisher of {x}"),
        ("Which organisation released {x}?", "Who released {x}?"),
    ),
    Relation(
        "release_year", WORK, YEAR, "released",
        ("{s} was released in {o}.", "{s} was released to the public in {o}."),
        ("the release year of {x}",),
        ("In what year was {x} released?", "When was {x} released?"),
    ),
    Relation(
        "founder", ORG, PERSON, "founder",
        ("The founder of {s} is {o}.", "{o} is the founder of {s}."),
        ("the founder of {x}", "the person who founded {x}"),
        ("Who founded {x}?", "Who was the founder of {x}?"),
    ),
    Relation(
        "founding_year", ORG, YEAR, "founded",
        ("{s} was founded in {o}.", "{s} was founded in the year {o}."),
        ("the founding year of {x}",),
        ("In what year was {x} founded?", "When was {x} founded?"),
    ),
    Relation(
        "headquarters", ORG, CITY, "headquarters",
        ("{s} has its headquarters in {o}.", "The headquarters of {s} are in {o}."),
        ("the city where {x} has its headquarters", "the headquarters city of {x}"),
        ("In which city does {x} have its headquarters?", "Where are the headquarters of {x}?"),
    ),
    Relation(
        "country", CITY, COUNTRY, "country",
        ("{s} is a city in the country of {o}.", "{s} lies in {o}, a country of the region."),
        ("the country of {x}", "the country in which {x} lies"),
        ("In which country is {x}?", "Which country is {x} in?"),
    ),
    Relation(
        "city_founding_year", CITY, YEAR, "founded",
        ("{s} was founded in {o}.", "{s} was founded as a town in {o}."),
        ("the founding year of {x}",),
        ("In what year was {x} founded?", "When was {x} founded?"),
    ),
    Relation(
        "capital", COUNTRY, CITY, "capital",
        ("The capital of {s} is {o}.", "{s} has its capital in {o}."),
        ("the capital of {x}", "the capital city of {x}"),
        ("What is the capital of {x}?", "Which city is the capital of {x}?"),
    ),
    Relation(
        "currency", COUNTRY, NAME, "currency",
        ("The currency of {s} is the {o}.", "{s} pays in the {o}, its national currency."),
        ("the currency of {x}",),
        ("What is the currency of {x}?", "Which currency is used in {x}?"),
    ),
)  # fmt: skip

INVERSE_SENTENCES = {
    "creator": "{s} created {x}.",
    "publisher": "{s} released {x}.",
    "founder": "{s} founded {x}.",
}
"""Back-links written into the object's passage, `{s}` being that object and `{x}` the entity
pointing at it (a person's page lists the works the person made)."""

_OBJECT_PATTERNS = {
    YEAR: r"\d{4}",
    OCCUPATION: "|".join(OCCUPATIONS),
    NAME: r"[A-Z][a-z]+",
}
_ENTITY_PATTERN = r"(?:[Tt]he (?:" + "|".join(OCCUPATIONS) + r") )?[A-Z][A-Za-z' ]*?"
_DISAMBIGUATED = re.compile(r"^[Tt]he (" + "|".join(OCCUPATIONS) + r") (.+)$")


def relation(name: str) -> Relation:
    """The relation called `name`."""
    for rel in RELATIONS:
        if rel.name == name:
            return rel
    raise KeyError(f"unknown relation {name!r}")


def relations_of(kind: str) -> tuple[Relation, ...]:
    """Every relation whose subject is an entity of `kind`, in table order."""
    return tuple(r for r in RELATIONS if r.subject == kind)


@cache
def sentence_patterns(name: str) -> tuple[re.Pattern[str], ...]:
    """Regexes reading the object out of each phrasing of relation `name`; the subject may be
    a name or a pronoun. Objects are typed (a year is four digits, an entity starts with a
    capital or is `the <occupation> Name`), so "born in 1903" never reads as a birthplace."""
    rel = relation(name)
    target = _OBJECT_PATTERNS.get(rel.target, _ENTITY_PATTERN)
    patterns = []
    for sentence in rel.sentences:
        before, after = sentence.split("{o}")
        head = re.escape(before).replace(re.escape("{s}"), r"[^.]*?")
        tail = re.escape(after).replace(re.escape("{s}"), r"[^.]*?")
        patterns.append(re.compile(rf"(?:^|(?<=\. )){head}(?P<o>{target}){tail}"))
    return tuple(patterns)


def parse_fact(name: str, text: str) -> str | None:
    """The object of relation `name` as written in `text`, or None when no phrasing matches."""
    for pattern in sentence_patterns(name):
        match = pattern.search(text)
        if match:
            value = match.group("o")
            # A mention opening its sentence is capitalised: "The painter X" → "the painter X".
            return "t" + value[1:] if _DISAMBIGUATED.match(value) else value
    return None


def title_of_mention(mention: str) -> str:
    """Passage title of the entity a text mention refers to: namesakes are mentioned as
    "the painter Orin Vasket" and titled "Orin Vasket (painter)"."""
    match = _DISAMBIGUATED.match(mention)
    return f"{match.group(2)} ({match.group(1)})" if match else mention


def mention_of_title(title: str) -> str:
    """Inverse of `title_of_mention`: "Orin Vasket (painter)" → "the painter Orin Vasket"."""
    match = re.match(r"^(.+) \((" + "|".join(OCCUPATIONS) + r")\)$", title)
    return f"the {match.group(2)} {match.group(1)}" if match else title


def name_of_mention(mention: str) -> str:
    """The bare name in a mention (what an answer should say)."""
    match = _DISAMBIGUATED.match(mention)
    return match.group(2) if match else mention


def query_of_mention(mention: str, keyword: str) -> str:
    """A short, entity-specific search query: the name, the disambiguating occupation if
    any, and the relation's keyword."""
    match = _DISAMBIGUATED.match(mention)
    name = f"{match.group(2)} {match.group(1)}" if match else mention
    return f"{name} {keyword}"
