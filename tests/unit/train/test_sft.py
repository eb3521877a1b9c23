"""SFT: reference transcripts tokenized segment by segment with env masked; loss goes down."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tests.unit.train.fakes import VOCAB, questions, scripted_rollout, tiny_llama

from searchrl.config.errors import ConfigError
from searchrl.config.sft import SFTConfig
from searchrl.data.world import Reference
from searchrl.train.meta_sft import replayed_references, rollout_questions
from searchrl.train.models import top_layers_only
from searchrl.train.sft import reference_trajectory, rejection_sample, run_sft, solved_references
from searchrl.types import Question, Trajectory


class CharTokenizer:
    """One token per character (ids < VOCAB), EOS = 1, no chat template."""

    chat_template = None
    eos_token_id = 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [2 + ord(c) % (VOCAB - 2) for c in text]


def _reference(em: float = 1.0) -> Reference:
    return Reference(
        id="r1",
        question="Where is X",
        golden_answers=("Y",),
        hops=1,
        segments=(
            {"role": "policy", "text": "<search> X </search>"},
            {"role": "env", "text": "<information>X is in Y</information>"},
            {"role": "policy", "text": "<answer> Y </answer>"},
        ),
        answer="Y",
        em=em,
    )


def test_reference_trajectory_masks_env_and_ends_with_eos() -> None:
    traj = reference_trajectory(_reference(), CharTokenizer(), use_chat_template=True)
    roles = [s.role for s in traj.segments]
    assert roles == ["policy", "env", "policy"]
    mask = traj.loss_mask()
    env_len = len("<information>X is in Y</information>")
    first = len("<search> X </search>")
    assert mask[first : first + env_len] == [0] * env_len
    assert traj.response_ids[-1] == CharTokenizer.eos_token_id and mask[-1] == 1
    assert traj.prompt_ids and traj.response_text.endswith("</answer>")


def test_only_solved_references_are_kept() -> None:
    assert solved_references([_reference(1.0), _reference(0.0)]) == [_reference(1.0)]


def test_sft_reduces_the_loss() -> None:
    model = tiny_llama()
    examples = [reference_trajectory(_reference(), CharTokenizer(), True) for _ in range(4)]
    config = SFTConfig(epochs=12.0, batch_size=4, micro_batch_size=2, lr=3e-3, warmup_ratio=0.0)
    history = run_sft(model, examples, pad_id=0, config=config, bf16=False)
    assert len(history) == 12
    assert history[-1]["sft/loss"] < 0.85 * history[0]["sft/loss"]
    assert all(h["sft/tokens_per_s"] > h["sft/loss_tokens_per_s"] > 0 for h in history)


def test_top_layers_only_trains_the_top_layers_then_restores() -> None:
    """The meta phase's `meta_train_layers`: inside the block SFT changes only the top layer
    and the final norm (the tied embedding/head and the lower layer stay bit-equal); after it
    every weight trains again."""
    model = tiny_llama()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    examples = [reference_trajectory(_reference(), CharTokenizer(), True) for _ in range(4)]
    config = SFTConfig(epochs=2.0, batch_size=4, micro_batch_size=2, lr=3e-3, warmup_ratio=0.0)
    with top_layers_only(model, 1):
        run_sft(model, examples, pad_id=0, config=config, bf16=False)
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all(n.startswith(("model.layers.1.", "model.norm.")) for n in changed)
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="has 2 layers"), top_layers_only(model, 3):
        pass
    assert all(p.requires_grad for p in model.parameters())


class _World:
    """The one thing `replayed_references` asks of an environment: a split's references."""

    def __init__(self, references: list[Reference]) -> None:
        self.refs = references

    def references(self, split: str) -> list[Reference]:
        return self.refs if split == "train" else []


def test_meta_replay_draws_actor_references_without_repeats_first() -> None:
    """The meta phase replays `meta_replay` Actor references per meta example: the Actor's own
    examples when it has them, else the world's solved train references (unsolved ones never),
    each used once before any is used twice."""
    solved = [replace(_reference(), id=f"r{i}") for i in range(3)]
    world = _World([*solved, replace(_reference(em=0.0), id="wrong")])
    tok = CharTokenizer()
    config = SFTConfig(meta_replay=0.5, seed=1)
    drawn = replayed_references(config, world, tok, [], n_meta=10)  # type: ignore[arg-type]
    assert len(drawn) == 5
    assert {t.id for t in drawn[:3]} == {"r0", "r1", "r2"}
    assert {t.id for t in drawn} <= {"r0", "r1", "r2"}
    actor = [reference_trajectory(r, tok, True) for r in solved]
    mine = replayed_references(config, world, tok, actor, n_meta=8)  # type: ignore[arg-type]
    assert len(mine) == 4 and {id(t) for t in mine[:3]} == {id(t) for t in actor}
    none = replayed_references(replace(config, meta_replay=0.0), world, tok, actor, 8)  # type: ignore[arg-type]
    assert none == []
    assert replayed_references(config, _World([]), tok, [], 8) == []  # type: ignore[arg-type]


def test_meta_replay_from_rollouts_replays_the_actor_s_own_samples() -> None:
    """`meta_replay_from: rollouts` replays the Actor's own train rollouts (flawed ones too:
    samples of the Actor anchor it where it was), never its references; without rollouts to
    replay the config is refused."""
    tok = CharTokenizer()
    solved = [replace(_reference(), id=f"r{i}") for i in range(3)]
    world = _World(solved)
    actor = [reference_trajectory(r, tok, True) for r in solved]
    own = [replace(reference_trajectory(r, tok, True), id=f"own{i}") for i, r in enumerate(solved)]
    config = SFTConfig(meta_replay=1.0, meta_replay_from="rollouts", meta_rollouts=3, seed=1)
    drawn = replayed_references(config, world, tok, actor, 5, own)  # type: ignore[arg-type]
    assert len(drawn) == 5 and {t.id for t in drawn[:3]} == {"own0", "own1", "own2"}
    assert {t.id for t in drawn} <= {"own0", "own1", "own2"}
    usual = replayed_references(
        replace(config, meta_replay_from="references"), world, tok, actor, 5, own
    )  # type: ignore[arg-type]
    assert {t.id for t in usual} == {"r0", "r1", "r2"}
    with pytest.raises(ConfigError, match="meta_replay_from"):
        SFTConfig(meta_replay_from="rollouts", meta_examples=4).validate()


def test_own_rollouts_go_to_the_questions_the_actor_was_not_taught_first() -> None:
    """The warm start's own rollouts are drawn from the train questions outside the Actor's
    references while there are enough of them (it rolled out the first questions, taught or
    not, and on a world whose references it had all been taught it was 0.96 right there);
    taught ones fill in, and samples per question grow only when every question is used."""
    pool = questions(6)
    taught = {pool[0].uid, pool[2].uid}
    chosen, per_question = rollout_questions(pool, taught, 3)
    assert [q.uid for q in chosen] == [pool[1].uid, pool[3].uid, pool[4].uid]
    assert per_question == 1
    chosen, per_question = rollout_questions(pool, taught, 5)
    assert [q.uid for q in chosen][-1] == pool[0].uid and len(chosen) == 5
    chosen, per_question = rollout_questions(pool, taught, 12)
    assert per_question == 2 and len(chosen) == 6
    assert rollout_questions(pool, set(), 2)[0] == pool[:2]


def _first_gradient(
    trajs: list[Trajectory], weights: list[float] | None, micro: int
) -> list[torch.Tensor]:
    """The gradient SFT's first optimizer step applies, one batch of all `trajs`."""
    model = tiny_llama()
    grads: list[torch.Tensor] = []
    original = torch.optim.AdamW.step

    def capture(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not grads:
            grads.extend(p.grad.clone() for p in model.parameters())
        return original(self, *args, **kwargs)

    config = SFTConfig(epochs=1.0, batch_size=len(trajs), micro_batch_size=micro, grad_clip=0.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.AdamW, "step", capture)
        run_sft(model, trajs, pad_id=0, config=config, bf16=False, example_weights=weights)
    return grads


def test_example_weights_make_a_weighted_token_mean() -> None:
    trajs = scripted_rollout(questions(2), n_samples=2, seed=5, greedy=False)
    plain = _first_gradient(trajs, None, micro=4)
    for a, b in zip(plain, _first_gradient(trajs, [2.0] * 4, micro=1), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)  # a common scale cancels
    only_first = _first_gradient(trajs, [1.0, 0.0, 0.0, 0.0], micro=2)
    for a, b in zip(only_first, _first_gradient(trajs[:1], None, micro=1), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert any(not torch.allclose(a, b) for a, b in zip(plain, only_first, strict=True))


def test_example_weights_are_checked() -> None:
    trajs = scripted_rollout(questions(1), n_samples=2, seed=5, greedy=False)
    with pytest.raises(ValueError, match="2 trajectories"):
        run_sft(tiny_llama(), trajs, 0, SFTConfig(), False, example_weights=[1.0])
    with pytest.raises(ValueError, match=">= 0"):
        run_sft(tiny_llama(), trajs, 0, SFTConfig(), False, example_weights=[1.0, -1.0])


def test_rejection_sampling_keeps_correct_trajectories() -> None:
    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        trajs = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
        for t in trajs:
            t.metrics["em"] = float(t.answer == "yes")
        return trajs

    questions = [Question(uid=f"q{i}", question="?", golden_answers=("yes",)) for i in range(4)]
    kept = rejection_sample(rollout, questions, n_samples=4, seed=0)
    assert kept and all(t.answer == "yes" for t in kept) and len(kept) < 16
