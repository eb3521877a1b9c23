"""The candidate answers' log-probs (KV-cached batch vs one full forward per candidate), and
the discriminator's and trimmer's decisions from them, checked by hand."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.refiner import MetaRefiner
from searchrl.refiner.meta import Reading, average_cut, draw_step, logsumexp
from searchrl.refiner.scoring import candidate_ids, candidate_logprobs
from searchrl.refiner.steps import content_free_text, render_meta
from searchrl.types import Trajectory


def test_candidates_are_digit_tokens_then_eos(tokenizer: PreTrainedTokenizerBase) -> None:
    cands = candidate_ids(tokenizer, 10)
    eos = tokenizer.eos_token_id
    assert cands[0] == [tokenizer.convert_tokens_to_ids("0"), eos]
    assert cands[10] == [*tokenizer.encode("10", add_special_tokens=False), eos]
    assert len(cands[10]) == 3 and cands[10][:1] == cands[1][:1]  # "1" is a prefix of "10"


def _naive(model: torch.nn.Module, prompt: list[int], cand: list[int]) -> float:
    ids = torch.tensor([prompt + cand])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(cand))


def test_batched_scores_match_full_forwards(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompts = [tokenizer.encode("short prompt"), tokenizer.encode("a longer prompt, with more")]
    cands = [candidate_ids(tokenizer, 2), candidate_ids(tokenizer, 11)]
    got = candidate_logprobs(tiny, prompts, cands, tokenizer.pad_token_id or 0, 8)
    for prompt, row_cands, row in zip(prompts, cands, got, strict=True):
        assert len(row) == len(row_cands)
        for cand, value in zip(row_cands, row, strict=True):
            assert value == pytest.approx(_naive(tiny, prompt, cand), abs=1e-4)
    split = candidate_logprobs(tiny, prompts, cands, tokenizer.pad_token_id or 0, 1)
    flat = [v for row in got for v in row]
    assert [v for row in split for v in row] == pytest.approx(flat, abs=1e-5)


def test_scores_come_back_in_the_prompts_order_whatever_their_lengths(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Micro-batches group prompts by length; each row still gets its own prompt's scores."""
    texts = ["the longest prompt of the three, by far the longest", "short", "a middle one"]
    prompts = [tokenizer.encode(t) for t in texts]
    cands = [candidate_ids(tokenizer, n) for n in (3, 1, 2)]
    got = candidate_logprobs(tiny, prompts, cands, tokenizer.pad_token_id or 0, 2)
    assert [len(row) for row in got] == [4, 2, 3]
    for prompt, row_cands, row in zip(prompts, cands, got, strict=True):
        for cand, value in zip(row_cands, row, strict=True):
            assert value == pytest.approx(_naive(tiny, prompt, cand), abs=1e-4)


def _reading(probs: list[float]) -> Reading:
    return Reading("p", [1], [[k] for k in range(len(probs))], [math.log(p) for p in probs])


def test_discriminator_margin_by_hand() -> None:
    reading = _reading([0.5, 0.3, 0.2])  # P(revise) = 0.5 = P(no revision): log-odds 0
    assert reading.log_odds == pytest.approx(0.0, abs=1e-12)
    assert not reading.revise(0.0)  # strictly greater than τ
    assert reading.revise(-0.01)
    tilted = _reading([0.2, 0.5, 0.3])
    assert tilted.log_odds == pytest.approx(math.log(0.8 / 0.2))
    assert tilted.revise(1.0) and not tilted.revise(1.5)
    assert not _reading([1.0]).revise(-100.0)  # no step, nothing to revise


def test_trimmer_distribution_argmax_and_draws() -> None:
    reading = _reading([0.4, 0.06, 0.36, 0.18])
    assert reading.trimmer() == pytest.approx([0.1, 0.6, 0.3])
    assert reading.cut(None) == 2
    assert _reading([0.2, 0.4, 0.4]).cut(None) == 1  # ties go to the earliest step
    draws = [reading.cut(random.Random(seed)) for seed in range(3000)]
    shares = [draws.count(k) / len(draws) for k in (1, 2, 3)]
    assert shares == pytest.approx([0.1, 0.6, 0.3], abs=0.03)
    assert reading.cut(random.Random(7)) == reading.cut(random.Random(7))


def test_tiny_model_decision_from_its_own_logprobs(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompt = tokenizer.encode("review these steps")
    cands = candidate_ids(tokenizer, 3)
    logp = candidate_logprobs(tiny, [prompt], [cands], 0, 4)[0]
    reading = Reading("", prompt, cands, logp)
    by_hand = [_naive(tiny, prompt, c) for c in cands]
    odds = logsumexp(by_hand[1:]) - by_hand[0]
    assert reading.log_odds == pytest.approx(odds, abs=1e-4)
    assert reading.revise(odds - 0.01) and not reading.revise(odds + 0.01)
    weights = [math.exp(v) for v in by_hand[1:]]
    assert reading.trimmer() == pytest.approx([w / sum(weights) for w in weights], abs=1e-4)


def _transcript(n_steps: int) -> Trajectory:
    traj = Trajectory(
        id=f"t{n_steps}", question="Who founded Mifour Studios?", golden_answers=["x"]
    )
    for i in range(n_steps):
        traj.append("policy", f"<search> query {i} </search>", [1, 2])
        traj.append("env", f"<information>Doc 1(Title: P{i}) text</information>", [3])
    return traj


def test_content_free_prior_removes_the_log_t_bias(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """An untrained discriminator spreads its mass over the T + 1 answers: summing T of them
    makes its raw log-odds ≈ log T, so at τ = 0 it revises everything, more surely the longer
    the trajectory. The content-free prior removes that."""
    trajs = [_transcript(n) for n in (1, 2, 4, 8)]

    def read(mode: str) -> list[Reading | None]:
        config = RefinerConfig(calibration=mode)  # type: ignore[arg-type]
        return MetaRefiner(tiny, tokenizer, None, None, RolloutConfig(), config, 0).read(trajs)  # type: ignore[arg-type]

    raw, calibrated = read("none"), read("content_free")
    raw_odds = [r.score for r in raw if r is not None]
    assert [r.prior for r in raw if r is not None] == [0.0] * 4
    assert raw_odds == pytest.approx([math.log(n) for n in (1, 2, 4, 8)], abs=0.25)
    assert all(r.revise(0.0) for r in raw[1:] if r is not None)
    scores = [r.score for r in calibrated if r is not None]
    assert max(abs(s) for s in scores) < 0.15
    for reading, n in zip(calibrated, (1, 2, 4, 8), strict=True):
        assert reading is not None and reading.log_odds == pytest.approx(
            raw_odds[n.bit_length() - 1]
        )
        _, ids = render_meta(tokenizer, content_free_text(n))
        by_hand = [_naive(tiny, ids, c) for c in candidate_ids(tokenizer, n)]
        assert reading.prior == pytest.approx(logsumexp(by_hand[1:]) - by_hand[0], abs=1e-4)


def test_reading_under_bf16_autocast_stays_near_the_fp32_reading(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`bf16=True` reads under bf16 autocast, as the trainer's forwards run where
    `policy.autocast` is on: the answers' log-probs move by rounding (so the autocast is
    really applied), not by whole nats (dynamic int8 moved them by up to 2.5), and the
    weights stay fp32."""
    trajs = [_transcript(n) for n in (1, 3)]
    config = RefinerConfig(calibration="none")

    def read(bf16: bool) -> list[list[float]]:
        refiner = MetaRefiner(tiny, tokenizer, None, None, RolloutConfig(), config, 0, bf16=bf16)  # type: ignore[arg-type]
        return [r.logprobs for r in refiner.read(trajs) if r is not None]

    full, half = read(False), read(True)
    moved = [abs(a - b) for f, h in zip(full, half, strict=True) for a, b in zip(f, h, strict=True)]
    assert max(moved) > 0.0
    assert max(moved) < 0.1
    assert all(p.dtype == torch.float32 for p in tiny.parameters())


class _Engine:
    """A generation engine that can score: the module's reading shifted by `offset` nats, so
    a test can tell which side read a row; `calls` keeps the prompts it was given."""

    def __init__(self, model: torch.nn.Module, max_model_len: int | None, offset: float = 5.0):
        self.model, self.max_model_len, self.offset = model, max_model_len, offset
        self.calls: list[list[list[int]]] = []

    def score(self, prompts: list[list[int]], cands: list[list[list[int]]]) -> list[list[float]]:
        self.calls.append(prompts)
        read = candidate_logprobs(self.model, prompts, cands, 0, 1)
        return [[v + self.offset for v in row] for row in read]


def test_reading_goes_to_the_engine_where_the_prompt_fits_its_context(
    tiny: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`read_on_engine`: meta prompts that fit the engine's context are scored there, longer
    ones (and all of them when it is off, or when the engine cannot say its context) by the
    module, each back in its own trajectory's place."""
    trajs = [_transcript(n) for n in (4, 1, 2)]

    def read(engine: object, on: bool = True) -> list[list[float]]:
        config = RefinerConfig(read_on_engine=on)
        refiner = MetaRefiner(tiny, tokenizer, engine, None, RolloutConfig(), config, 0)  # type: ignore[arg-type]
        return [r.logprobs for r in refiner.read(trajs) if r is not None]

    def flat(rows: list[list[float]], offset: float = 0.0) -> list[float]:
        return [v + offset for row in rows for v in row]

    module = read(None)
    reader = MetaRefiner(tiny, tokenizer, None, None, RolloutConfig(), RefinerConfig(), 0)  # type: ignore[arg-type]
    longest = reader.read(trajs[:1])[0]
    assert longest is not None
    # the 4-step transcript's prompt and answer ("0" + end of turn) need one token more
    engine = _Engine(tiny, max_model_len=len(longest.prompt_ids) + 1)
    mixed = read(engine)
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 2
    assert all(len(p) < len(longest.prompt_ids) for p in engine.calls[0])
    assert mixed[0] == pytest.approx(module[0], abs=1e-5)
    for got, want in zip(mixed[1:], module[1:], strict=True):
        assert got == pytest.approx([v + 5.0 for v in want], abs=1e-4)
    assert flat(read(_Engine(tiny, 10_000))) == pytest.approx(flat(module, 5.0), abs=1e-4)
    assert flat(read(_Engine(tiny, 10_000), on=False)) == pytest.approx(flat(module), abs=1e-5)
    assert flat(read(_Engine(tiny, None))) == pytest.approx(flat(module), abs=1e-5)


def test_batch_average_cut_distribution_by_hand() -> None:
    assert average_cut([[0.2, 0.8], [1.0], [0.1, 0.1, 0.8]]) == pytest.approx(
        [1.3 / 3, 0.9 / 3, 0.8 / 3]
    )
    rng = random.Random(0)
    draws = [draw_step([0.5, 1.5], rng) for _ in range(4000)]
    assert draws.count(2) / len(draws) == pytest.approx(0.75, abs=0.03)


def test_trimmer_tilted_by_the_steps_surprisal_by_hand() -> None:
    """π_h(k) ∝ P(k) · s_k: the tilt moves the trimmer, never the discriminator's log-odds."""
    probs = [0.4, 0.4, 0.2]  # P(0), P(1), P(2): π_h = (2/3, 1/3)
    plain = Reading("", [], [[0], [1], [2]], [math.log(p) for p in probs])
    tilted = Reading("", [], [[0], [1], [2]], plain.logprobs, tilt=(math.log(0.1), math.log(0.5)))
    assert plain.cut(None) == 1 and tilted.cut(None) == 2
    expected = [0.4 * 0.1, 0.2 * 0.5]
    assert tilted.trimmer() == pytest.approx([p / sum(expected) for p in expected])
    assert tilted.log_odds == plain.log_odds and tilted.revise(0.0) == plain.revise(0.0)
