"""The per-rank memory plan (`train.memory_plan`, `searchrl train --dry-run`): exact parameter
counts from a config.json alone (no weights on disk), the arithmetic of each strategy, vLLM's
share and KV cache, and the one-line refusal of a plan that cannot fit (issue 63)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.unit.train.fakes import tiny_config
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.train import TrainConfig
from searchrl.train import memory_plan
from searchrl.train.memory_plan import GIB, ModelShape, PlanDoesNotFit, make_plan, read_shape

QWEN_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
}  # fmt: skip
"""Qwen2.5-7B's config.json (its model card: 7.61 B parameters)."""
QWEN_7B_PARAMS = 7_615_616_512


@pytest.fixture(scope="module")
def qwen_7b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder with Qwen2.5-7B's config.json and nothing else: no weights to read."""
    folder = tmp_path_factory.mktemp("qwen7b")
    (folder / "config.json").write_text(json.dumps(QWEN_7B))
    return folder


@pytest.fixture(scope="module")
def shape(qwen_7b: Path) -> ModelShape:
    return read_shape(tiny_config(model={"name_or_path": str(qwen_7b)}))


def config(**overrides: dict[str, object]) -> TrainConfig:
    """The paper's per-GPU setting at 7B (sections of `overrides` merged into these)."""
    settings: dict[str, dict[str, object]] = {
        "rollout": {"max_total_tokens": 4096, "max_turns": 4, "max_response_tokens": 500},
        "model": {"vllm_gpu_memory_utilization": 0.6},
        "policy": {"gradient_checkpointing": True, "autocast": "bf16"},
    }
    for key, section in overrides.items():
        settings[key] = {**settings.get(key, {}), **section}
    return tiny_config(micro_batch_size=2, **settings)


def item(plan: memory_plan.MemoryPlan, start: str) -> memory_plan.Item:
    return next(i for i in plan.items if i.name.startswith(start))


def test_the_model_is_counted_exactly_from_its_config_alone(shape: ModelShape) -> None:
    assert shape.params == QWEN_7B_PARAMS
    assert shape.layers == 28 and shape.vocab == 152064 and shape.kv_dim == 4 * 128
    assert shape.head_params == shape.embed_params == 152064 * 3584  # untied


def test_trained_state_is_16_bytes_a_parameter_whole_under_ddp_and_divided_by_fsdp(
    shape: ModelShape,
) -> None:
    """DDP keeps weights, gradients and AdamW states whole on every GPU; FSDP divides them by
    the ranks (plus the units it gathers), its CPU offload moves them to host memory."""
    p = QWEN_7B_PARAMS
    ddp = make_plan(config(), shape, 8, 80 * GIB)
    assert item(ddp, "policy weights").gpu == 4 * p and item(ddp, "AdamW").gpu == 8 * p
    assert item(ddp, "policy gradients").gpu == 4 * p
    assert item(ddp, "policy gradients").when == "update"
    assert item(ddp, "frozen reference").gpu == 4 * p  # kl_coef > 0, no LoRA
    assert not ddp.fits and "GiB more than the 80.0 GiB" in ddp.verdict()
    fsdp = make_plan(config(policy={"strategy": "fsdp"}), shape, 8, 80 * GIB)
    assert item(fsdp, "policy weights").gpu == 4 * p / 8
    assert item(fsdp, "FSDP units").gpu == 4 * (2 * shape.embed_params + 2 * shape.layer_params)
    offload = make_plan(
        config(policy={"strategy": "fsdp", "fsdp_cpu_offload": True}), shape, 8, 80 * GIB
    )
    assert item(offload, "AdamW").gpu == 0 and item(offload, "AdamW").host == 8 * p / 8
    assert offload.fits
    alone = make_plan(config(policy={"strategy": "fsdp"}), shape, 1, 80 * GIB)
    assert item(alone, "policy weights").gpu == 4 * p  # one process never shards


def test_vllm_s_share_its_kv_cache_and_sleep(shape: ModelShape) -> None:
    """The share is reserved at the engine's start; its KV cache is what the engine's
    weights (bf16, head untied) and workspace leave; asleep, only the workspace stays."""
    plan = make_plan(config(policy={"strategy": "fsdp"}), shape, 8, 80 * GIB)
    share = item(plan, "vLLM share")
    assert share.gpu == 0.6 * 80 * GIB and share.when == "rollout"
    assert item(plan, "vLLM asleep").when == "update"
    kv = 0.6 * 80 * GIB - 2 * QWEN_7B_PARAMS - memory_plan.ENGINE_WORKSPACE_GIB * GIB
    assert plan.kv_tokens == int(kv // (2 * 28 * 512 * 2))
    awake = make_plan(
        config(policy={"strategy": "fsdp"}, model={"vllm_sleep_mode": "off"}), shape, 8, 80 * GIB
    )
    assert item(awake, "vLLM share").when == "always"
    assert awake.phase("update") == plan.phase("update") - item(plan, "vLLM asleep").gpu + share.gpu
    small = make_plan(
        config(
            model={"vllm_gpu_memory_utilization": 0.2},
            policy={"strategy": "fsdp", "fsdp_cpu_offload": True},
        ),
        shape, 8, 80 * GIB,
    )  # fmt: skip
    assert small.kv_tokens == 0 and not small.fits and "less than one sequence" in small.verdict()


def test_the_critic_lora_and_the_hf_engine_change_the_plan(shape: ModelShape) -> None:
    base = make_plan(config(), shape, 1, 80 * GIB)
    ppo = make_plan(config(algo={"advantage": "gae"}), shape, 1, 80 * GIB)
    assert item(ppo, "critic weights").gpu == 12 * (QWEN_7B_PARAMS - shape.head_params)
    lora = make_plan(config(policy={"lora_rank": 8}), shape, 1, 80 * GIB)
    assert item(lora, "AdamW").gpu == 8 * shape.lora_params(8) < item(base, "AdamW").gpu
    assert not any(i.name.startswith("frozen reference") for i in lora.items)  # adapters off
    hf = make_plan(config(model={"backend": "hf"}), shape, 1, 80 * GIB)
    assert hf.kv_tokens == 0 and not any(i.name.startswith("vLLM") for i in hf.items)


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["train", *args])
    return result.exit_code, result.stdout, result.stderr


def test_dry_run_prints_the_plan_without_weights_or_data(
    qwen_7b: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interface of issue 63: the paper preset's plan for its 8 GPUs, exit 0, from a
    folder holding config.json only, in a directory without the paper's data files."""
    monkeypatch.chdir(tmp_path)
    assert not os.path.exists("data")
    for model in ("embedded", str(qwen_7b)):
        code, out, err = _cli(
            "--config", "search_r1_grpo", "--dry-run", f"model.name_or_path={model}"
        )
        assert code == 0, err
        assert "8 GPUs of 80 GiB, FSDP + CPU offload" in out and "fits:" in out
    assert "7.62 B parameters" in out


def test_a_plan_that_cannot_fit_exits_1_with_one_line(qwen_7b: Path) -> None:
    code, out, err = _cli(
        "--config", "search_r1_grpo", "--dry-run", f"model.name_or_path={qwen_7b}",
        "plan.gpus=1",
    )  # fmt: skip
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1
    assert "GiB more than the 80.0 GiB of one" in errors[0]
    assert "one process" in out  # the whole plan was printed first


def test_a_run_on_gpus_is_refused_before_it_loads(
    qwen_7b: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check_plan` at the start of `train`: a GPU too small refuses the run; a CPU run has
    no plan; `plan.check=false` lets one try."""
    run = config(model={"name_or_path": str(qwen_7b)}, policy={"gradient_checkpointing": False})
    monkeypatch.setattr(memory_plan, "gpu_memory_here", lambda: None)
    assert memory_plan.check_plan(run) is None
    monkeypatch.setattr(memory_plan, "gpu_memory_here", lambda: (1, 24 * GIB))
    with pytest.raises(PlanDoesNotFit, match=r"GiB more than the 24\.0 GiB of one"):
        memory_plan.check_plan(run)
    assert (
        memory_plan.check_plan(config(model={"name_or_path": str(qwen_7b)}, plan={"check": False}))
        is None
    )


@pytest.mark.slow
def test_the_shipped_embedded_config_is_the_gguf_s() -> None:
    """The dry run reads the embedded model's config from a shipped config.json instead of
    the GGUF header (10-20 s); the two must agree."""
    from transformers import AutoConfig

    from searchrl.models.loading import EMBEDDED_CONFIG, embedded_gguf_path

    gguf = embedded_gguf_path()
    header = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).to_dict()
    shipped = AutoConfig.from_pretrained(EMBEDDED_CONFIG).to_dict()
    ignore = {"_name_or_path", "transformers_version", "_model_name_or_path"}
    assert {k: v for k, v in header.items() if k not in ignore} == {
        k: v for k, v in shipped.items() if k not in ignore
    }
