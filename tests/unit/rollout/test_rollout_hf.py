"""The engine over the real HF sampling loop (tiny random Llama): masks match the generated
tokens, and a rollout resumed from a prefix reproduces the original continuation."""

from __future__ import annotations

import copy
import dataclasses

from rollout_fakes import DictRetriever

from searchrl.config.rollout import RolloutConfig
from searchrl.models.hf_backend import HFBackend
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question, Trajectory

QUESTIONS = [
    Question("a", "What is the capital of France?", ("Paris",)),
    Question("b", "Who designed the Eiffel Tower?", ("Gustave Eiffel",)),
    Question("c", "Where is Berlin?", ("Germany",)),
]
CONFIG = RolloutConfig(max_turns=2, max_response_tokens=6, temperature=1.0, top_p=0.95)


class Recording:
    """Wraps a backend and keeps every generation it returned."""

    def __init__(self, backend: HFBackend):
        self.backend = backend
        self.generated: list = []

    def generate(self, prompts, params):
        outputs = self.backend.generate(prompts, params)
        self.generated.extend(outputs)
        return outputs


def prefix_of(traj: Trajectory, segments: int) -> Trajectory:
    """What Search-R2's cut does: keep the first `segments` segments and their searches."""
    cut = copy.deepcopy(traj)
    cut.segments = cut.segments[:segments]
    turns = sum(s.role == "policy" for s in cut.segments)
    cut.searches = [c for c in cut.searches if c.turn <= turns]
    cut.stats = dataclasses.replace(cut.stats, turns=turns, stop_reason="", generation_s=0.0)
    return cut


def test_policy_spans_are_exactly_the_generated_tokens(tokenizer, tiny, docs) -> None:
    backend = Recording(HFBackend(tiny, tokenizer, max_batch_size=4))
    trajs = run_rollouts(backend, tokenizer, DictRetriever(docs), QUESTIONS, CONFIG, seed=7)
    policy_spans = [s.token_ids for t in trajs for s in t.segments if s.role == "policy"]
    assert sorted(policy_spans) == sorted(g.token_ids for g in backend.generated)
    for traj in trajs:
        assert traj.stats.turns == CONFIG.max_turns + 1  # a random model never answers
        for segment in traj.segments:
            assert tokenizer.decode(segment.token_ids) == segment.text
        mask = traj.loss_mask()
        assert sum(mask) == traj.stats.policy_tokens
        assert len(mask) - sum(mask) == traj.stats.env_tokens


def test_prefix_continuation_reproduces_the_rest_of_the_run(tokenizer, tiny, docs) -> None:
    backend = HFBackend(tiny, tokenizer, max_batch_size=4)
    original = run_rollouts(backend, tokenizer, DictRetriever(docs), QUESTIONS, CONFIG, seed=11)
    target = original[1]
    prefix = prefix_of(target, 2)
    (resumed,) = run_rollouts(
        backend,
        tokenizer,
        DictRetriever(docs),
        [QUESTIONS[1]],
        CONFIG,
        prefixes=[prefix],
        seed=11,
    )
    assert resumed.id == target.id
    assert resumed.segments == target.segments
    assert resumed.searches == target.searches
    assert resumed.stats.turns == target.stats.turns
    assert resumed.stats.stop_reason == target.stats.stop_reason
    other_seed = run_rollouts(
        backend, tokenizer, DictRetriever(docs), [QUESTIONS[1]], CONFIG, prefixes=[prefix], seed=12
    )[0]
    assert other_seed.segments[:2] == target.segments[:2]
    assert other_seed.segments[2:] != target.segments[2:]


def test_kv_reuse_across_turns_does_not_change_trajectories(tokenizer, tiny, docs) -> None:
    runs = []
    for prefix_cache in (True, False):
        backend = HFBackend(tiny, tokenizer, max_batch_size=4, prefix_cache=prefix_cache)
        runs.append(
            run_rollouts(backend, tokenizer, DictRetriever(docs), QUESTIONS, CONFIG, seed=5)
        )
    cached, plain = runs
    assert [t.segments for t in cached] == [t.segments for t in plain]
