"""Fixtures for the model tests: the real SmolLM2 tokenizer (cached across test sessions, since
reading it out of the GGUF takes ~10 s), tiny random models over its vocabulary, and one torch
thread (tiny matmuls on 2 busy cores are ~100x slower with two OpenMP threads)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    return load_tokenizer(ModelConfig(), cache_dir=cache)


@pytest.fixture(scope="session")
def tiny(tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    return tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0)


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
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any, **_: Any
    ) -> SimpleNamespace:
        ids = input_ids.float()[:, None, :, None]  # [rows, 1, new, 1]
        history, _ = cache.update(ids, ids, 0)  # [rows, 1, seen, 1]
        seen = history[:, 0, :, 0].long()
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
