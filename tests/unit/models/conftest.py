"""Fixtures for the model tests: a scripted LM that drives the real sampling loop, and one
torch thread per module. The real tokenizer and the tiny model come from tests/conftest.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase


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
