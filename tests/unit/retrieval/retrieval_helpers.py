"""Test data shared by the retrieval tests: a small corpus with one obviously relevant
passage per test query, and a JSONL writer."""

from __future__ import annotations

import json
from pathlib import Path

PASSAGES = {
    "eiffel": (
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was designed by "
        "the engineering company of Gustave Eiffel and completed in 1889 for the World's Fair.",
    ),
    "photosynthesis": (
        "Photosynthesis",
        "Photosynthesis is the process by which green plants use sunlight to turn water and "
        "carbon dioxide into sugar and oxygen. It happens in the chloroplasts of leaf cells.",
    ),
    "python": (
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum and first "
        "released in 1991. Its design emphasizes code readability.",
    ),
    "everest": (
        "Mount Everest",
        "Mount Everest is the highest mountain on Earth above sea level, located in the "
        "Himalayas on the border between Nepal and China.",
    ),
    "reef": (
        "Great Barrier Reef",
        "The Great Barrier Reef is the largest coral reef system in the world, off the coast "
        "of Queensland, Australia.",
    ),
    "bach": (
        "Johann Sebastian Bach",
        "Johann Sebastian Bach was a German composer of the Baroque period, known for the "
        "Brandenburg Concertos and the Mass in B minor.",
    ),
    "citibank": (
        "Citibank",
        "The City Bank of New York was founded on June 16, 1812. Its first president was "
        "Samuel Osgood.",
    ),
    "tea": (
        "Tea",
        "Tea is an aromatic beverage prepared by pouring hot or boiling water over cured or "
        "fresh leaves of the Camellia sinensis shrub. Café culture — naïve façade, 東京.",
    ),
}


def write_jsonl(path: Path, rows: list[object]) -> Path:
    """Write one JSON value per line."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path
