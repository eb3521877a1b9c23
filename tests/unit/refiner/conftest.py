"""Every test here runs on one torch thread (`tokenizer`, `tiny`: tests/conftest.py); `setup`
is the scripted rollout the cut-and-regenerate tests refine."""

from __future__ import annotations

import pytest
from tests.unit.refiner.scripted import DOCS, Script
from tests.unit.rollout.rollout_fakes import DictRetriever, ScriptedBackend
from transformers import PreTrainedTokenizerBase

from searchrl.config.rollout import RolloutConfig
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, Trajectory


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Tiny matmuls on 2 busy cores are far slower with two OpenMP threads."""


@pytest.fixture
def setup(tokenizer: PreTrainedTokenizerBase) -> tuple[ScriptedBackend, DictRetriever, Trajectory]:
    """The scripted Actor's one rollout (search, search, answer "A1"; gold "A2"), with the
    backend and retriever that made it, for cutting and regenerating."""
    backend = ScriptedBackend(tokenizer, Script())
    retriever = DictRetriever(DOCS)
    question = Question(uid="q1", question="Who designed it?", golden_answers=("A2",))
    (traj,) = run_rollouts(backend, tokenizer, retriever, [question], RolloutConfig())
    return backend, retriever, traj
