"""Shared fixtures: where the real shared data lives (tests skip cleanly when it is absent), the
real tokenizer, tiny random models, and one torch thread."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from searchrl.config.model import ModelConfig
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (or $SEARCHRL_SHARED_DATA); skips the test when it is not there."""
    if not (SHARED_DATA / "qa").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def hf_engine_under_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """`model.backend=auto` means vLLM where it is installed and bf16 is fast; in-process tests
    keep the HF engine they were written for (a vLLM start costs ~30 CPU-seconds each), and
    the engine tests ask for `backend="vllm"` explicitly."""
    from searchrl.models import vllm_backend

    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: False)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Run a module on one torch thread: tiny matmuls on 2 busy cores are far slower with two
    OpenMP threads fighting other processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    """The real SmolLM2 tokenizer, cached across test sessions (reading it out of the GGUF
    takes ~10 s)."""
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    return load_tokenizer(ModelConfig(), cache_dir=cache)


@pytest.fixture(scope="session")
def tiny(tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    """A tiny random Llama over the real vocabulary."""
    return tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=0)


def write_merge_parquet(path: Path, sources: dict[str, list[tuple[str, str, list[str]]]]) -> Path:
    """A parquet shaped as Search-R1's `scripts/data_process/qa_search_train_merge.py` leaves
    it (source → (FlashRAG id, question, golden answers)): FlashRAG's columns kept (`id`, the
    question stripped and ending in "?", `golden_answers`), then the columns the script adds
    (`data_source`, a one-message `prompt` holding the paper's instruction, `ability`,
    `reward_model.ground_truth.target`, `extra_info` whose `index` restarts in every source);
    sources concatenated in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from searchrl.data.templates import SEARCH_R1_TEMPLATE

    rows = []
    for source, items in sources.items():
        for index, (qid, question, answers) in enumerate(items):
            question = question.strip() + ("" if question.strip().endswith("?") else "?")
            rows.append(
                {
                    "id": qid,
                    "question": question,
                    "golden_answers": answers,
                    "data_source": source,
                    "prompt": [
                        {"role": "user", "content": SEARCH_R1_TEMPLATE.format(question=question)}
                    ],
                    "ability": "fact-reasoning",
                    "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
                    "extra_info": {"split": "train", "index": index},
                }
            )
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="session")
def merge_parquet():
    """`write_merge_parquet`, for tests that feed Search-R1's training file."""
    return write_merge_parquet
