"""`answer_weight`: the answer's tokens weigh more in the SFT loss (issue 64: the answer was
3-5 of ~85 trained tokens, ~5 % of what a grounded reference teaches)."""

from __future__ import annotations

import copy

import torch

from searchrl.config.sft import SFTConfig
from searchrl.data.templates import FORCED_ANSWER
from searchrl.data.world import Reference
from searchrl.train.sft import answer_token_weights, reference_trajectory, run_sft
from searchrl.types import Trajectory

SEARCH = "<think> I need to search. </think>\n<search> France </search>"
PASSAGES = '\n\n<information>Doc 1(Title: "Paris") Paris is the capital.</information>\n\n'
READ = '<think> Doc 1 says: "Paris is the capital" </think>\n<answer> Paris </answer>'


def _reference() -> Reference:
    return Reference(
        id="nq:1",
        question="What is the capital of France",
        golden_answers=("Paris",),
        hops=1,
        segments=(
            {"role": "policy", "text": SEARCH},
            {"role": "env", "text": PASSAGES},
            {"role": "policy", "text": READ},
        ),
        answer="Paris",
        em=1.0,
    )


def test_the_answer_tokens_and_only_they_get_the_weight(tokenizer) -> None:
    traj = reference_trajectory(_reference(), tokenizer, use_chat_template=True)
    weights = answer_token_weights(traj, tokenizer, 8.0)
    assert len(weights) == len(traj.response_ids)
    heavy = [t for t, w in zip(traj.response_ids, weights, strict=True) if w == 8.0]
    light = [t for t, w in zip(traj.response_ids, weights, strict=True) if w == 1.0]
    assert len(heavy) + len(light) == len(weights)
    text = tokenizer.decode(heavy)
    assert "<answer> Paris </answer>" in text and text.endswith(tokenizer.eos_token)
    assert "answer>" not in tokenizer.decode(light) and "Paris is the capital" not in text
    assert 3 <= len(heavy) <= 12
    assert answer_token_weights(traj, tokenizer, 1.0) == [1.0] * len(weights)


def test_an_answer_the_engine_opened_is_weighted_whole(tokenizer) -> None:
    traj = Trajectory(id="q", question="q", golden_answers=["Paris"])
    for role, text in (("policy", "<think> done </think>"), ("env", FORCED_ANSWER),
                       ("policy", " Paris </answer>")):  # fmt: skip
        traj.append(role, text, tokenizer.encode(text, add_special_tokens=False))  # type: ignore[arg-type]
    weights = answer_token_weights(traj, tokenizer, 5.0)
    completion = len(traj.segments[-1].token_ids)
    assert weights[-completion:] == [5.0] * completion
    assert weights[:-completion] == [1.0] * (len(weights) - completion)


def test_the_loss_is_the_weighted_token_mean(tokenizer, tiny) -> None:
    traj = reference_trajectory(_reference(), tokenizer, use_chat_template=True)
    weights = answer_token_weights(traj, tokenizer, 10.0)
    model = copy.deepcopy(tiny)
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    start = len(traj.prompt_ids)
    targets = torch.tensor(traj.response_ids)
    token_logp = logp[start - 1 : start - 1 + len(targets)].gather(1, targets[:, None])[:, 0]
    mask = torch.tensor(traj.loss_mask(), dtype=torch.float32)
    w = mask * torch.tensor(weights)
    want = float(-(w * token_logp).sum() / w.sum())
    config = SFTConfig(epochs=1.0, batch_size=1, micro_batch_size=1, grad_clip=0.0, lr=1e-9)
    history = run_sft(model, [traj], 0, config, False, token_weights=[weights])
    assert abs(history[0]["sft/loss"] - want) < 1e-4 * abs(want), (history[0], want)
    plain = float(-(mask * token_logp).sum() / mask.sum())
    assert abs(plain - want) > 1e-3 * abs(want)  # the weight changed what is minimised
