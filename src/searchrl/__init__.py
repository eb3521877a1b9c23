"""searchrl: train and evaluate language models that reason while calling a search engine.

Implements Search-R1 (RL over multi-turn search trajectories, retrieved tokens masked out of the
loss) and Search-R2 (a Meta-Refiner that cuts and regenerates flawed trajectories).
"""

from searchrl.data.templates import search_r1_prompt
from searchrl.reward.metrics import (
    exact_match,
    extract_answer,
    f1_score,
    normalize_answer,
    sub_exact_match,
)
from searchrl.types import Document, Hit, Question, Segment, Trajectory

__version__ = "0.1.0"

__all__ = [
    "Document",
    "Hit",
    "Question",
    "Segment",
    "Trajectory",
    "__version__",
    "exact_match",
    "extract_answer",
    "f1_score",
    "normalize_answer",
    "search_r1_prompt",
    "sub_exact_match",
]
