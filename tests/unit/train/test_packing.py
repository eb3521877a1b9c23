"""Packed micro-batches compute exactly what separate, unpadded sequences compute: the same
log-probs, the same SFT and policy losses and the same gradients; env tokens never reach the
loss (checked against the trajectories' own token ids)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from tests.unit.train.fakes import questions, scripted_rollout, tiny_llama

from searchrl.algo.losses import aggregate, make_loss_weights, token_mean_weights, training_mask
from searchrl.train.collate import collate
from searchrl.train.logprobs import batched_logprobs, forward_logprobs
from searchrl.train.models import Critic, enable_checkpointing
from searchrl.train.packing import PACKED_SDPA, enable_packing, micro_batches, pack
from searchrl.train.update import Experience, UpdateSettings, optimize, policy_micro_loss
from searchrl.types import Trajectory


def _trajectories(shared: bool = True) -> list[Trajectory]:
    """Two samples each of 3 questions; with `shared`, every prompt starts with the same 5
    tokens (the instruction) and the samples of a question share their whole prompt."""
    trajs = scripted_rollout(questions(3), n_samples=2, seed=3, greedy=False)
    if shared:
        for first, second in zip(trajs[::2], trajs[1::2], strict=True):
            first.prompt_ids = [7, 8, 9, 10, 11, *first.prompt_ids]
            second.prompt_ids = list(first.prompt_ids)
    return trajs


def _padded_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights on eager attention: `forward_logprobs` then takes the padded path."""
    twin = copy.deepcopy(model)
    twin.config._attn_implementation = "eager"
    return twin


def _unpadded_logprobs(model: torch.nn.Module, traj: Trajectory) -> dict[int, torch.Tensor]:
    """log p(token | prefix) of each policy token of `traj`, one sequence alone in a batch of
    one, keyed by the token's index in the response; targets read from the segments."""
    ids = traj.prompt_ids + traj.response_ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    out, t = {}, 0
    for segment in traj.segments:
        for token in segment.token_ids:
            if segment.role == "policy":
                out[t] = logp[len(traj.prompt_ids) + t - 1, token]
            t += 1
    return out


def test_pack_lays_rows_end_to_end_with_restarting_positions() -> None:
    trajs = _trajectories()
    batch = collate(trajs, pad_id=0)
    packed = pack(batch, share_prefix=False)
    assert packed.shared_prefix == 0
    expected = [tok for t in trajs for tok in t.prompt_ids + t.response_ids]
    assert packed.input_ids[0].tolist() == expected
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajs]
    assert packed.cu_seq_lens.tolist() == [sum(lengths[:i]) for i in range(len(trajs) + 1)]
    assert packed.position_ids[0].tolist() == [p for n in lengths for p in range(n)]
    for row, traj in enumerate(trajs):  # response token 0 of each row sits at response_start
        start = int(packed.response_start[row])
        assert packed.input_ids[0, start] == traj.response_ids[0]


def test_pack_lays_a_shared_prefix_down_once() -> None:
    trajs = _trajectories()
    packed = pack(collate(trajs, pad_id=0), share_prefix=True)
    assert packed.shared_prefix == 5
    expected = trajs[0].prompt_ids[:5] + [
        tok for t in trajs for tok in (t.prompt_ids + t.response_ids)[5:]
    ]
    assert packed.input_ids[0].tolist() == expected
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajs]
    assert packed.position_ids[0].tolist() == list(range(5)) + [
        p for n in lengths for p in range(5, n)
    ]
    pair = pack(collate(trajs[:2], pad_id=0), share_prefix=True)  # a group: the whole prompt
    assert pair.shared_prefix == len(trajs[0].prompt_ids)
    one = pack(collate(trajs[:1], pad_id=0), share_prefix=True)
    assert one.shared_prefix == 0


@pytest.mark.parametrize("shared", [False, True])
def test_packed_logprobs_equal_each_sequence_alone_and_env_tokens_stay_out(shared: bool) -> None:
    torch.manual_seed(0)
    model = tiny_llama()
    assert enable_packing(model) == PACKED_SDPA == model.config._attn_implementation
    trajs = _trajectories(shared)
    batch = collate(trajs, pad_id=0)
    mask = training_mask(batch.policy_mask, batch.response_mask, mask_env=True)
    with torch.no_grad():
        logp, _ = forward_logprobs(model, batch, 1.0, "none", mask)
    for row, traj in enumerate(trajs):
        alone = _unpadded_logprobs(model, traj)
        computed = {int(t) for t in logp[row].nonzero().squeeze(1)}
        assert computed == set(alone)  # exactly the policy tokens, never an env token
        for t, value in alone.items():
            torch.testing.assert_close(logp[row, t], value, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("checkpointing", "shared"), [(False, False), (False, True), (True, True)])
def test_packed_and_padded_give_the_same_sft_loss_and_gradients(
    checkpointing: bool, shared: bool
) -> None:
    torch.manual_seed(0)
    packed_model = tiny_llama()
    padded_model = _padded_twin(packed_model)
    if checkpointing:  # recomputation in backward must see the packed attention too
        enable_checkpointing(packed_model)
    packed_model.train()
    padded_model.train()
    trajs = _trajectories(shared)
    batch = collate(trajs, pad_id=0)
    mask = training_mask(batch.policy_mask, batch.response_mask, mask_env=True)
    weights = token_mean_weights(mask)

    def loss_and_grads(model: torch.nn.Module, micro: int) -> tuple[float, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        total = 0.0
        for start in range(0, len(trajs), micro):
            rows = list(range(start, min(start + micro, len(trajs))))
            mb = batch.select(rows)
            w = weights[rows, : mb.response_length]
            logp, _ = forward_logprobs(model, mb, 1.0, "none", w > 0)
            loss = -aggregate(logp, w)
            loss.backward()
            total += float(loss.detach())
        return total, [p.grad.clone() for p in model.parameters()]

    padded_loss, padded_grads = loss_and_grads(padded_model, micro=1)
    alone = [sum(_unpadded_logprobs(padded_model, t).values()) for t in trajs]
    manual = -float(sum(alone)) / float(mask.sum())
    assert padded_loss == pytest.approx(manual, rel=1e-5)
    for micro in (1, 4, len(trajs)):
        packed_loss, packed_grads = loss_and_grads(packed_model, micro)
        assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
        for a, b in zip(padded_grads, packed_grads, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_entropy_and_batched_logprobs_match_the_padded_path() -> None:
    torch.manual_seed(0)
    model = tiny_llama()
    padded = _padded_twin(model)
    batch = collate(_trajectories(), pad_id=0)
    mask = batch.policy_mask
    logp, ent = forward_logprobs(model, batch, 0.7, "grad", mask)
    ref_logp, ref_ent = forward_logprobs(padded, batch, 0.7, "grad", mask)
    assert ent is not None and ref_ent is not None
    torch.testing.assert_close(logp * mask, ref_logp * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent * mask, ref_ent * mask, atol=1e-5, rtol=1e-5)
    full = batched_logprobs(model, batch, 4, 1.0, False)  # no mask: every response token
    ref_full = batched_logprobs(padded, batch, 2, 1.0, False)
    torch.testing.assert_close(full, ref_full, atol=1e-5, rtol=1e-5)


def test_switching_to_packed_attention_leaves_padded_forwards_unchanged() -> None:
    model = tiny_llama()
    model.eval()
    batch = collate(_trajectories(), pad_id=0)
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
    }
    with torch.no_grad():
        before = model(**inputs).logits
        enable_packing(model)
        after = model(**inputs).logits
    assert torch.equal(before, after)


def test_eager_attention_is_not_packed() -> None:
    model = _padded_twin(tiny_llama())
    assert enable_packing(model) is None
    assert model.config._attn_implementation == "eager"


def test_packed_and_padded_give_the_same_policy_update() -> None:
    """One GRPO mini-batch through `optimize` (clipped surrogate, seq-mean-token-mean weights,
    old log-probs from a no-grad pass): same stats and same SGD step, packed (3 rows a forward)
    or padded (one row a forward)."""
    torch.manual_seed(0)
    packed_model = tiny_llama()
    padded_model = _padded_twin(packed_model)
    trajs = _trajectories()
    batch = collate(trajs, pad_id=0)
    mask = training_mask(batch.policy_mask, batch.response_mask, mask_env=True)
    advantages = torch.linspace(-1.0, 1.0, len(trajs)).unsqueeze(1) * mask
    settings = UpdateSettings(
        micro_batch_size=1, grad_clip=0.0, bf16=False, temperature=1.0, clip_eps=0.2,
        kl_coef=0.0, entropy_coef=0.01, value_clip=0.5,
    )  # fmt: skip

    lengths = batch.attention_mask.sum(1)

    def update(
        model: torch.nn.Module, micro: int, cap: int = 0
    ) -> tuple[dict[str, float], list[torch.Tensor]]:
        old = batched_logprobs(model, batch, micro, 1.0, False, mask, cap) - 0.05 * mask
        exp = Experience(batch, mask, old, advantages)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        loss = policy_micro_loss(model, exp, replace(settings, micro_batch_size=micro), None)
        rows = [list(range(len(trajs)))]
        weights = make_loss_weights("seq-mean-token-mean")
        params = list(model.parameters())
        stats = optimize(
            params,
            optimizer,
            rows,
            lambda picked: weights(mask[picked]),
            micro,
            0.0,
            loss,
            "actor",
            lengths,
            cap,
        )
        return stats, [p.detach().clone() for p in model.parameters()]

    padded_stats, padded_params = update(padded_model, 1)
    twin = copy.deepcopy(packed_model)
    for model, micro, cap in ((packed_model, 3, 0), (twin, 6, int(lengths.max()) + 5)):
        packed_stats, packed_params = update(model, micro, cap)
        assert padded_stats.keys() == packed_stats.keys()
        for key, value in padded_stats.items():
            assert packed_stats[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        for a, b in zip(padded_params, packed_params, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_micro_batches_cap_rows_and_tokens() -> None:
    assert micro_batches([5, 5, 5, 5], max_rows=3) == [[0, 1, 2], [3]]
    assert micro_batches([5, 5, 20, 5, 5], max_rows=8, max_tokens=12) == [[0, 1], [2], [3, 4]]
    assert micro_batches([], max_rows=2) == []


def test_packed_critic_values_and_gradients_equal_the_padded_ones() -> None:
    torch.manual_seed(0)
    critic = Critic(tiny_llama())
    torch.nn.init.normal_(critic.head.weight, std=0.1)  # zero at init: give values a signal
    padded = copy.deepcopy(critic)
    padded.backbone.config._attn_implementation = "eager"
    batch = collate(_trajectories(), pad_id=0)
    results = []
    for model in (critic, padded):
        values = model(batch)
        (values * batch.response_mask).sum().backward()
        results.append((values.detach(), [p.grad.clone() for p in model.parameters()]))
    assert critic.backbone.config._attn_implementation == PACKED_SDPA
    (packed_values, packed_grads), (padded_values, padded_grads) = results
    mask = batch.response_mask
    torch.testing.assert_close(packed_values * mask, padded_values * mask, atol=1e-5, rtol=1e-5)
    for a, b in zip(packed_grads, padded_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
