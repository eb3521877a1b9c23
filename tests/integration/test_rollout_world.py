"""End to end over real pieces: the synthetic world, a real BM25 index of its corpus and the
real SmolLM2 tokenizer. A scripted policy replays the world's reference solver turn by turn
(it issues the right queries); the engine must do the searching, insert exactly the
observations the solver saw, and reach the right answer on multi-hop questions."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from transformers import PreTrainedTokenizerBase

from searchrl.config.data import world_preset
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import INFORMATION_CLOSE
from searchrl.data.world import generate_world, solve
from searchrl.models.generation import Generation, SamplingParams
from searchrl.models.loading import embedded_gguf_path, load_tokenizer
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.rollout.loop import run_rollouts


@pytest.fixture(scope="module")
def tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    return load_tokenizer(ModelConfig(), cache_dir=cache)


class ReplayPolicy:
    """Emits, for the question in the context, the reference solver's next policy turn (the
    turn number is the count of observations already in the context), as real token ids cut
    at the first stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, turns: dict[str, list[str]]):
        self.tokenizer = tokenizer
        self.turns = turns

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        outputs = []
        for prompt, p in zip(prompts, params, strict=True):
            context = self.tokenizer.decode(list(prompt))
            question = next(q for q in self.turns if f"Question: {q}" in context)
            turn = context.count(INFORMATION_CLOSE)
            text = self.turns[question][turn] + " and then some more text"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            n = next(
                n
                for n in range(1, len(ids) + 1)
                if any(s in self.tokenizer.decode(ids[:n]) for s in p.stop)
            )
            outputs.append(Generation(ids[:n], [0.0] * n, self.tokenizer.decode(ids[:n]), "stop"))
        return outputs


def test_scripted_policy_solves_multi_hop_world_questions(tokenizer) -> None:
    world = generate_world(world_preset("test"))
    retriever = BM25Retriever.build(world.documents)
    config = RolloutConfig(topk=3, max_turns=4)
    questions = [q for q in world.questions["test"] if (q.hops or 0) >= 2]
    references = solve(questions, retriever, config.topk)
    solved = [(q, r) for q, r in zip(questions, references, strict=True) if r.em == 1.0]
    solved = [(q, r) for q, r in solved if sum(s["role"] == "policy" for s in r.segments) <= 5]
    assert len(solved) >= 5, "the world's solver should solve several multi-hop questions"
    solved = solved[:8]
    turns = {
        q.question.strip(): [s["text"] for s in r.segments if s["role"] == "policy"]
        for q, r in solved
    }
    trajs = run_rollouts(
        ReplayPolicy(tokenizer, turns), tokenizer, retriever, [q for q, _ in solved], config
    )
    assert max(t.stats.searches for t in trajs) >= 2
    for traj, (question, reference) in zip(trajs, solved, strict=True):
        assert traj.answer == reference.answer and traj.metrics["em"] == 1.0
        assert traj.stats.stop_reason == "answer"
        assert [s.role for s in traj.segments] == [s["role"] for s in reference.segments]
        assert [s.text for s in traj.segments] == [s["text"] for s in reference.segments]
        assert traj.stats.searches == question.hops or traj.stats.searches >= 2
        for segment in traj.segments:
            assert tokenizer.decode(segment.token_ids) == segment.text
