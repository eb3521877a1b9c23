"""Log-probs restricted to the used response columns equal the full computation there."""

from __future__ import annotations

import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_llama

from searchrl.train.collate import collate
from searchrl.train.logprobs import batched_logprobs, forward_logprobs


def test_masked_columns_match_the_full_computation_values_and_gradients() -> None:
    model = tiny_llama()
    trajectories = scripted_rollout(questions(2), n_samples=2, seed=1, greedy=False)
    batch = collate(trajectories, pad_id=0)
    mask = batch.policy_mask
    assert not bool(mask.all())

    def run(use_mask: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logp, ent = forward_logprobs(model, batch, 1.0, "grad", mask if use_mask else None)
        assert ent is not None
        ((logp + ent) * mask).sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters()]

    full, full_grads = run(False)
    part, part_grads = run(True)
    torch.testing.assert_close(part * mask, full * mask)
    assert torch.equal(
        part[~mask.bool().any(0).expand_as(mask)],
        torch.zeros_like(part)[~mask.bool().any(0).expand_as(mask)],
    )
    for a, b in zip(full_grads, part_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    no_grad = batched_logprobs(model, batch, 3, 1.0, False, mask)
    torch.testing.assert_close(no_grad * mask, full * mask)
