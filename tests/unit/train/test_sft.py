"""SFT: reference transcripts tokenized segment by segment with env masked; loss goes down."""

from __future__ import annotations

from tests.unit.train.fakes import VOCAB, scripted_rollout, tiny_llama

from searchrl.config.train import SFTConfig
from searchrl.data.world import Reference
from searchrl.train.sft import reference_trajectory, rejection_sample, run_sft, solved_references
from searchrl.types import Question


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


def test_rejection_sampling_keeps_correct_trajectories() -> None:
    def rollout(qs, *, n_samples, seed, greedy):  # type: ignore[no-untyped-def]
        trajs = scripted_rollout(qs, n_samples=n_samples, seed=seed, greedy=greedy)
        for t in trajs:
            t.metrics["em"] = float(t.answer == "yes")
        return trajs

    questions = [Question(uid=f"q{i}", question="?", golden_answers=("yes",)) for i in range(4)]
    kept = rejection_sample(rollout, questions, n_samples=4, seed=0)
    assert kept and all(t.answer == "yes" for t in kept) and len(kept) < 16
