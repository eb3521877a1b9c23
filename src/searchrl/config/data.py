"""Settings of the data stage: the synthetic search world and training mixes.

The world exists because a 135M-parameter model on a laptop cannot learn to search over real
Wikipedia in minutes, and because a model may already know the answers to real questions. An
invented encyclopedia has answers that exist only in its corpus, so every correct answer was
found by searching.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from searchrl.config.checks import (
    Fraction,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    Range,
    Seed,
    positive_total,
)
from searchrl.config.errors import ConfigError

MIN_ENTITIES = 10
"""The generator builds at least this many entities (one of each kind and their links)."""
Entities = Annotated[int, Range(ge=MIN_ENTITIES)]


@dataclass(frozen=True)
class WorldConfig:
    """How big the invented world is, how hard its questions are and how noisy its corpus is."""

    seed: Seed = 0
    """Seed of the one `random.Random` the generator draws from: same seed, same files."""

    num_entities: Entities = 400
    """Entities before distractors are added (people, places, organisations, works, countries)."""

    kind_shares: tuple[
        NonNegativeFloat, NonNegativeFloat, NonNegativeFloat, NonNegativeFloat, NonNegativeFloat
    ] = (0.45, 0.12, 0.03, 0.15, 0.25)
    """Shares of people, cities, countries, organisations and works among `num_entities`."""

    spouse_rate: Fraction = 0.5
    """Fraction of people who are married to another person of the world."""

    same_name_rate: Fraction = 0.08
    """Fraction of people given a namesake: a second person with the same name and another
    occupation. Both are then written as `Name (occupation)` and named with the occupation."""

    near_duplicate_rate: Fraction = 0.08
    """Fraction of entities given a near-duplicate twin: one syllable of the name changed, the
    same kind of facts with different values, so lexical search can land on the wrong one."""

    phrasing_variety: PositiveInt = 3
    """How many phrasings of each fact and question are in use (1 = always the first)."""

    sentences_per_passage: PositiveInt = 3
    """Sentences per passage; an entity's facts are spread over several passages, as
    Wikipedia spreads them over sections."""

    filler_sentences: NonNegativeInt = 1
    """Fact-free sentences added to each entity, so passages are not pure fact lists."""

    hop_weights: tuple[NonNegativeFloat, NonNegativeFloat, NonNegativeFloat, NonNegativeFloat] = (
        0.25,
        0.25,
        0.25,
        0.25,
    )
    """Relative frequency of questions needing 1, 2, 3 and 4 hops."""

    train_questions: NonNegativeInt = 300
    """Questions in the train split."""

    dev_questions: NonNegativeInt = 50
    """Questions in the dev split."""

    test_questions: NonNegativeInt = 100
    """Questions in the test split."""

    reference_top_k: PositiveInt = 3
    """Passages per search in the reference trajectories (Search-R1's top-k)."""

    held_out_facts: Literal["disjoint", "shared"] = "disjoint"
    """`disjoint`: no train question chains a hop fact (subject, relation) of a dev or test
    question, so no training transcript states a fact a held-out question needs (the corpus
    still holds them all). `shared`: the splits differ only in (start entity, relation chain),
    as worlds were generated before; in those, a quarter of the demo's test questions had every
    hop fact stated in the SFT's references (`searchrl.data.world.leakage`)."""

    def validate(self) -> None:
        """Weights must leave something to draw, and a world must have questions."""
        positive_total("kind_shares", self.kind_shares)
        positive_total("hop_weights", self.hop_weights)
        if self.train_questions + self.dev_questions + self.test_questions == 0:
            raise ConfigError("train_questions: every split is empty (all question counts are 0)")


WORLD_PRESETS = ("test", "demo", "large")
"""The named world sizes of `world_preset` (`searchrl world --config NAME`)."""


def world_preset(name: str) -> WorldConfig:
    """Named sizes: `test` (unit tests, well under a second), `demo` (CPU demo: ~300 entities,
    ~1000 passages, a few hundred questions, a few seconds) and `large` (~20k entities)."""
    presets = {
        "test": WorldConfig(
            num_entities=120, train_questions=120, dev_questions=20, test_questions=60
        ),
        "demo": WorldConfig(),
        "large": WorldConfig(
            num_entities=20_000, train_questions=20_000, dev_questions=1_000, test_questions=2_000
        ),
    }
    if name not in presets:
        raise ConfigError(f"unknown world preset {name!r}; choose one of {sorted(presets)}")
    return presets[name]


@dataclass(frozen=True)
class MixConfig:
    """A training mix: which sources, from which files, shuffled how."""

    sources: tuple[str, ...] = ("nq", "hotpotqa")
    """Benchmark names (the paper's training set is NQ train + HotpotQA train)."""

    split: NonEmptyStr = "train"
    """Split to take from each source."""

    seed: Seed = 0
    """Seed of the shuffle of the pooled questions."""

    max_per_source: PositiveInt | None = None
    """Keep at most this many questions of each source (None keeps all)."""

    def validate(self) -> None:
        """A mix needs at least one source."""
        if not self.sources:
            raise ConfigError("sources: a mix needs at least one benchmark name")


@dataclass(frozen=True)
class GroundingConfig:
    """Reference trajectories for real questions, which have no scripted solver: search the
    question, keep the question when a gold answer is in the passages, and write the transcript
    a searcher would (`data.grounded`). What a 135M model can imitate: copy the question as
    the query, quote the passage sentence that holds the answer, copy the answer."""

    bridge: bool = True
    """When the first search misses, try a second search for an entity the first passages
    name (HotpotQA's bridge questions: the film's passage names the director, whose own
    passage holds the birthplace); keep it when that search finds a gold answer."""
    comparisons: bool = True
    """Comparison questions (HotpotQA's `comparison` type, or a yes/no answer, or one the
    question names) get a transcript that searches each of the two entities the question
    names and answers from both (`data.comparison`); without it they are never grounded."""
    bridge_candidates: PositiveInt = 6
    """Most entities of the first passages tried as the second query, in order of appearance
    (passage titles first)."""
    quote_words: PositiveInt = 30
    """The final thought quotes the sentence holding the answer, cut to this many words
    around it."""
    max_questions: NonNegativeInt = 0
    """Ground at most the first N training questions (0: all); grounding searches every
    question once and up to `bridge_candidates` more times."""
