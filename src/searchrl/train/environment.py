"""Wiring for training runs: the world (questions, references, corpus), the retriever, the
policy and its generation backend, and the rollout function the trainer calls.

Kept apart from the trainer so that `train.loop` stays about RL and tests can hand it fakes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.train import DataConfig, PolicyConfig
from searchrl.data.benchmarks import load_flashrag_jsonl
from searchrl.data.world import Reference, generate_world, load_references, write_world
from searchrl.models.generation import GenerationBackend
from searchrl.models.loading import (
    generation_backend,
    load_model,
    resolve_backend,
    seeded_engine,
)
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.corpus import read_corpus
from searchrl.rollout.loop import run_rollouts
from searchrl.train.models import merged_for_export, prepare_policy
from searchrl.train.ports import RolloutFn
from searchrl.types import Question
from searchrl.utils.output import atomic_directory

WORLD_SOURCE = "world"


@dataclass
class Environment:
    """Everything outside the networks that a run needs."""

    world_dir: Path
    retriever: Retriever
    splits: dict[str, list[Question]]

    def questions(self, split: str) -> list[Question]:
        """Questions of one split (train, dev, test)."""
        if split not in self.splits:
            self.splits[split] = load_flashrag_jsonl(
                self.world_dir / f"{split}.jsonl", WORLD_SOURCE
            )
        return self.splits[split]

    def training_pool(self, data: DataConfig) -> list[Question]:
        """The RL questions: `data.train_split` less the questions `data.exclude_trained_by`
        names (a warm start's `trained_questions.txt`, or a file of ids)."""
        questions = self.questions(data.train_split)
        if not data.exclude_trained_by:
            return questions
        excluded = read_question_ids(Path(data.exclude_trained_by))
        pool = [q for q in questions if _short_id(q.uid) not in excluded]
        if not pool:
            raise ValueError(
                f"data.exclude_trained_by={data.exclude_trained_by}: it names every question "
                f"of the {data.train_split!r} split, none is left to train on"
            )
        return pool

    def references(self, split: str) -> list[Reference]:
        """The world's scripted reference trajectories for one split."""
        return load_references(self.world_dir / f"references_{split}.jsonl")


TRAINED_QUESTIONS = "trained_questions.txt"
"""What `searchrl sft` writes into its run folder: the ids of the questions it trained on."""


def _short_id(uid: str) -> str:
    """`world:train_12` and `train_12` name the same question (references drop the source)."""
    return uid.partition(":")[2] or uid


def read_question_ids(path: Path) -> set[str]:
    """Question ids from a file (one a line) or a `searchrl sft` run folder holding one."""
    file = path / TRAINED_QUESTIONS if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"data.exclude_trained_by={path}: no {TRAINED_QUESTIONS} there (written by "
            "`searchrl sft` since this version) and not a file of question ids"
        )
    return {_short_id(line.strip()) for line in file.read_text().splitlines() if line.strip()}


def prepare_world(data: DataConfig, out_dir: Path) -> Path:
    """The world directory: `data.world_dir`, or one generated once into `<out>/world`."""
    if data.world_dir:
        return Path(data.world_dir)
    target = out_dir / "world"
    if not (target / "manifest.json").is_file():
        write_world(generate_world(data.world), target)
    return target


def build_environment(data: DataConfig, out_dir: Path) -> Environment:
    """World files plus a BM25 retriever over its corpus (a prebuilt index when given), or a
    client of a remote `/retrieve` server."""
    from searchrl.retrieval.bm25 import BM25Retriever

    world_dir = prepare_world(data, out_dir)
    if data.retriever == "remote":
        from searchrl.retrieval.remote import RemoteRetriever

        retriever: Retriever = RemoteRetriever(data.remote)
    elif data.index_dir:
        retriever = BM25Retriever.load(data.index_dir)
    else:
        retriever = BM25Retriever.build(read_corpus(world_dir / "corpus.jsonl"))
    return Environment(world_dir=world_dir, retriever=retriever, splits={})


def load_policy(model: ModelConfig, policy: PolicyConfig) -> tuple[nn.Module, object]:
    """The trainable policy (fp32 master weights) and its tokenizer; `init_checkpoint`
    replaces the weights source (e.g. an SFT output directory)."""
    source = (
        replace(model, name_or_path=policy.init_checkpoint) if policy.init_checkpoint else model
    )
    loaded = load_model(replace(source, dtype="float32"))
    tokenizer = loaded.tokenizer
    if tokenizer.pad_token_id is None:  # type: ignore[attr-defined]
        tokenizer.pad_token = tokenizer.eos_token  # type: ignore[attr-defined]
    return prepare_policy(loaded.model, policy), tokenizer


def make_backend(
    model: ModelConfig, policy: nn.Module, tokenizer: object, max_len: int, *, seed: int = 0
) -> GenerationBackend:
    """The generation engine for rollouts: HF with a bf16 copy, CTranslate2 or vLLM (CPU or
    GPU), as `resolve_backend` picks, started on the current policy weights, then re-synced
    after every update by `sync_generation_weights`. `seed` is the run's; only vLLM takes it
    here, whose one stream starts from it (`seeded_engine`): HF and CTranslate2 rows are
    seeded per call by the rollout's seed."""
    if resolve_backend(model) == "vllm":
        from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

        model = seeded_engine(model, seed)
        device = next(policy.parameters()).device
        return VLLMBackend.from_module(
            merged_for_export(policy),
            tokenizer,
            model,
            dtype=engine_dtype(model, device),
            max_model_len=max_len,
        )
    return generation_backend(model, merged_for_export(policy), tokenizer)  # type: ignore[arg-type]


def make_rollout_fn(
    backend: GenerationBackend,
    policy: nn.Module,
    tokenizer: object,
    retriever: Retriever,
    config: RolloutConfig,
    *,
    sync: bool = True,
) -> RolloutFn:
    """The trainer's rollout function: push the current weights to the generation engine
    (unless `sync` is off: `train.overlap` syncs itself), then run the multi-turn search
    protocol (greedy for evaluation)."""

    def rollout(questions: Sequence[Question], *, n_samples: int, seed: int, greedy: bool):  # type: ignore[no-untyped-def]
        if sync:
            sync_generation_weights(backend, policy)
        settings = replace(config, temperature=0.0) if greedy else config
        with torch.no_grad():
            return run_rollouts(
                backend, tokenizer, retriever, questions, settings, n_samples=n_samples, seed=seed
            )

    return rollout


def sync_generation_weights(backend: GenerationBackend, policy: nn.Module) -> None:
    """After each update the generation engine must see the new weights (a converted copy in
    the HF backend, the vLLM engine on GPU); LoRA policies are merged into a plain copy first.
    Generating with the policy module itself makes this a no-op."""
    backend.sync_weights(merged_for_export(policy))  # type: ignore[attr-defined]


def export_model(
    policy: nn.Module, tokenizer: object, out: Path, state_dict: dict | None = None
) -> None:
    """A plain HF directory (LoRA merged) that `model.name_or_path` / `init_checkpoint` load;
    `state_dict` gives the whole weights of a sharded (FSDP) policy, gathered beforehand.
    Written next to `out` and renamed into place, so a kill or a full disk never leaves a
    half-written model where `chat` or a warm start would load it."""
    with atomic_directory(out, force=True) as tmp:
        if state_dict is not None:
            policy.save_pretrained(tmp, state_dict=state_dict)  # type: ignore[operator]
        else:
            merged_for_export(policy).save_pretrained(tmp)  # type: ignore[operator]
        tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
