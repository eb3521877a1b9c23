"""Fixtures for the rollout tests: the real SmolLM2 tokenizer (cached across sessions, since
reading it out of the GGUF takes ~10 s), a tiny random Llama over its vocabulary, a few
documents, and one torch thread (tiny matmuls on 2 busy cores are ~100x slower with two OpenMP
threads)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model
from searchrl.types import Document


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


@pytest.fixture
def docs() -> list[Document]:
    return [
        Document("d1", '"Paris"\nParis is the capital of France.'),
        Document("d2", '"France"\nFrance is a country in Europe. Its capital is Paris.'),
        Document("d3", '"Berlin"\nBerlin is the capital of Germany.'),
        Document("d4", '"Eiffel Tower"\nThe Eiffel Tower was designed by Gustave Eiffel.'),
    ]
