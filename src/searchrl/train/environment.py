"""Wiring for training runs: the world (questions, references, corpus), the retriever, the
policy and its generation backend, and the rollout function the trainer calls.

Kept apart from the trainer so that `train.loop` stays about RL and tests can hand it fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from searchrl.config.errors import ConfigError
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.train import DataConfig, PolicyConfig, TrainConfig
from searchrl.data.benchmarks import DataError, load_flashrag_jsonl
from searchrl.data.grounded import ground_references
from searchrl.data.sources import WORLD_SOURCE, load_sources, missing_input, parse_spec
from searchrl.data.world import Reference, generate_world, load_references, write_world
from searchrl.data.world.solver import write_references
from searchrl.models.generation import GenerationBackend, WeightSyncable
from searchrl.models.loading import (
    generation_backend,
    head_size,
    load_model,
    load_model_config,
    load_tokenizer,
    resolve_device,
    seeded_engine,
    start_engine,
)
from searchrl.models.weights import compute_device, weights_version
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.corpus import read_corpus
from searchrl.rollout.loop import run_rollouts
from searchrl.train.collect import engine_seed
from searchrl.train.models import Critic, frozen_reference, merged_for_export, prepare_policy
from searchrl.train.ports import Distributed, RolloutFn
from searchrl.types import Question
from searchrl.utils.output import atomic_directory


@dataclass
class Environment:
    """Everything outside the networks that a run needs: the questions of each split, their
    reference transcripts and the search engine.

    Splits come from `data.train_files` / `data.val_files` (real QA files, a world among
    them if named) or, without them, from the world's split files. References are the
    world's scripted transcripts for world questions and transcripts grounded in retrieval
    (`data.grounded`) for the others, built once per run folder."""

    world_dir: Path | None
    retriever: Retriever
    splits: dict[str, list[Question]]
    data: DataConfig = field(default_factory=DataConfig)
    out_dir: Path | None = None
    topk: int = 3
    progress: bool = True

    def _specs(self, split: str) -> tuple[str, ...]:
        if split == self.data.train_split:
            return self.data.train_files
        if split == self.data.eval_split:
            return self.data.val_files
        return ()

    def questions(self, split: str) -> list[Question]:
        """Questions of one split: `data.train_files` for `data.train_split`, `val_files`
        for `data.eval_split`, else the world's split file."""
        if split not in self.splits:
            specs = self._specs(split)
            if specs:
                self.splits[split] = load_sources(specs, split, self.data.mix_seed)
            elif self.world_dir is not None:
                path = self.world_dir / f"{split}.jsonl"
                self.splits[split] = load_flashrag_jsonl(path, WORLD_SOURCE)
            else:
                raise DataError(f"no questions for the {split!r} split: no files and no world")
        return self.splits[split]

    def training_pool(self, data: DataConfig) -> list[Question]:
        """The RL questions: `data.train_split` less the questions `data.exclude_trained_by`
        names (a warm start's `trained_questions.txt`, or a file of ids)."""
        questions = self.questions(data.train_split)
        if not data.exclude_trained_by:
            return questions
        excluded = read_question_ids(Path(data.exclude_trained_by))
        pool = [q for q in questions if q.uid not in excluded]
        if not pool:
            raise ValueError(
                f"data.exclude_trained_by={data.exclude_trained_by}: it names every question "
                f"of the {data.train_split!r} split, none is left to train on"
            )
        return pool

    def references(
        self, split: str, visible: Callable[[str], str] | None = None
    ) -> list[Reference]:
        """Reference transcripts of one split's questions: the world's scripted ones, and
        grounded ones for real questions (written to `<out>/references_<split>.jsonl`), where
        `visible` is what the policy is shown of an `<information>` block."""
        specs = self._specs(split)
        if not specs:
            assert self.world_dir is not None
            return load_references(self.world_dir / f"references_{split}.jsonl")
        refs: list[Reference] = []
        for world in {parse_spec(s).path for s in specs if parse_spec(s).world}:
            refs += load_references(world / f"references_{split}.jsonl")
        real = [q for q in self.questions(split) if q.source != WORLD_SOURCE]
        if real:
            refs += self._grounded(split, real, visible)
        order = {q.uid: i for i, q in enumerate(self.questions(split))}
        return sorted((r for r in refs if _uid(r) in order), key=lambda r: order[_uid(r)])

    def _grounded(
        self, split: str, questions: list[Question], visible: Callable[[str], str] | None
    ) -> list[Reference]:
        refs = ground_references(
            questions, self.retriever, self.topk, self.data.grounding,
            visible=visible, progress=self.progress,
        )  # fmt: skip
        if self.out_dir is not None:  # the record of what the warm start imitated
            self.out_dir.mkdir(parents=True, exist_ok=True)
            write_references(refs, self.out_dir / f"references_{split}.jsonl")
        return refs


def _uid(reference: Reference) -> str:
    """World references carry the bare question id; grounded ones the uid."""
    return reference.id if ":" in reference.id else f"{WORLD_SOURCE}:{reference.id}"


TRAINED_QUESTIONS = "trained_questions.txt"
"""What `searchrl sft` writes into its run folder: the ids of the questions it trained on."""


def read_question_ids(path: Path) -> set[str]:
    """Question uids from a file (one a line) or a `searchrl sft` run folder holding one; a
    bare id (`train_12`, as world references name their question) is a world question's."""
    file = path / TRAINED_QUESTIONS if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"data.exclude_trained_by={path}: no {TRAINED_QUESTIONS} there (written by "
            "`searchrl sft` since this version) and not a file of question ids"
        )
    ids = (line.strip() for line in file.read_text().splitlines())
    return {i if ":" in i else f"{WORLD_SOURCE}:{i}" for i in ids if i}


def prepare_world(data: DataConfig, out_dir: Path) -> Path | None:
    """The world directory: `data.world_dir`, or one generated once into `<out>/world` when
    no training files are named (real data never makes a world)."""
    if data.world_dir:
        return Path(data.world_dir)
    if data.train_files:
        return None
    target = out_dir / "world"
    if not (target / "manifest.json").is_file():
        write_world(generate_world(data.world), target)
    return target


def open_search(data: DataConfig, world_dir: Path | None) -> Retriever:
    """The run's search engine: a remote `/retrieve` server, the index `data.index_dir`
    (any kind `searchrl index` builds, searched in this process), or BM25 over the world's
    corpus built in memory."""
    if data.retriever == "remote":
        from searchrl.retrieval.remote import RemoteRetriever

        return RemoteRetriever(data.remote)
    if data.index_dir:
        from searchrl.retrieval.index import load_index

        return load_index(data.index_dir)
    from searchrl.retrieval.bm25 import BM25Retriever

    if world_dir is None:
        raise DataError("data.index_dir: real training questions need an index to search")
    return BM25Retriever.build(read_corpus(world_dir / "corpus.jsonl"))


def build_environment(
    data: DataConfig, out_dir: Path, *, topk: int = 3, progress: bool = True
) -> Environment:
    """Questions, references and the search engine of a run (see `Environment`)."""
    missing = missing_input(data.train_files, "data.train_files") or missing_input(
        data.val_files, "data.val_files"
    )
    if missing:
        raise DataError(missing)
    world_dir = prepare_world(data, out_dir)
    retriever = open_search(data, world_dir)
    return Environment(world_dir, retriever, {}, data, out_dir, topk, progress)


def _weights_source(model: ModelConfig, policy: PolicyConfig) -> ModelConfig:
    """`model`, or the `init_checkpoint` folder that replaces its weights (an SFT output)."""
    if policy.init_checkpoint:
        return replace(model, name_or_path=policy.init_checkpoint)
    return model


def load_policy(
    model: ModelConfig, policy: PolicyConfig, *, sharded: bool = False
) -> tuple[nn.Module, object]:
    """The trainable policy (fp32 master weights) and its tokenizer; `init_checkpoint`
    replaces the weights source (e.g. an SFT output directory). `sharded` (FSDP): read into
    host memory, where `train.fsdp.shard` moves it to the GPU one unit at a time."""
    source = replace(_weights_source(model, policy), dtype="float32")
    loaded = load_model(replace(source, device="cpu") if sharded else source)
    tokenizer = loaded.tokenizer
    if tokenizer.pad_token_id is None:  # type: ignore[attr-defined]
        tokenizer.pad_token = tokenizer.eos_token  # type: ignore[attr-defined]
    return prepare_policy(loaded.model, policy), tokenizer


def start_engine_first(
    model: ModelConfig,
    policy: PolicyConfig,
    max_len: int,
    *,
    seed: int = 0,
    overlapped: bool = False,
) -> WeightSyncable | None:
    """The vLLM engine for rollouts, started from the policy's config alone (no weights
    read) before any model of the trainer is loaded: vLLM reserves its share of a GPU only
    if that share is free, and then sleeps until the first sync (`train.run`). None where
    the HF engine generates (`start_engine` says why): it needs the loaded module.
    `seed`, `overlapped`: as in `make_backend`."""
    source = _weights_source(model, policy)
    hf_config, generation = load_model_config(source)
    tokenizer = load_tokenizer(source)

    def start() -> GenerationBackend:
        from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

        engine = seeded_engine(model, seed)
        return VLLMBackend.from_config(
            hf_config, tokenizer, engine, dtype=engine_dtype(engine, resolve_device(model.device)),
            max_model_len=max_len, generation=generation, overlapped=overlapped,
        )  # fmt: skip

    backend = start_engine(model, head_size(hf_config), start)
    if backend is None:
        return None
    assert isinstance(backend, WeightSyncable)
    backend.release()  # the trainer's models load next
    return backend


def make_backend(
    model: ModelConfig,
    policy: nn.Module,
    tokenizer: object,
    max_len: int,
    *,
    seed: int = 0,
    overlapped: bool = False,
    engine: WeightSyncable | None = None,
    tried: bool = False,
) -> GenerationBackend:
    """The generation engine for rollouts, holding the current policy weights: `engine` (one
    `start_engine_first` started) synced from the policy, or else vLLM (CPU or GPU) when
    `model` asks for it and `auto` finds that it starts on this policy (`start_engine`: the
    head size read from the policy being trained), else the HF backend; re-synced after
    every update by `sync_generation_weights`. `seed` is the run's; only vLLM takes it here,
    whose stream starts from it (`seeded_engine`): HF rows are seeded per call by the
    rollout's seed. `overlapped`: the engine will generate while this process trains
    (`train.overlap`), so it runs in processes of its own. `tried`: `start_engine_first`
    already chose the HF engine (and said why), so no vLLM engine is tried again."""
    if engine is not None:
        sync_generation_weights(engine, policy)
        return engine  # type: ignore[return-value]
    module = merged_for_export(policy)

    def start() -> GenerationBackend:
        from searchrl.models.vllm_backend import VLLMBackend, engine_dtype

        engine = seeded_engine(model, seed)
        return VLLMBackend.from_module(
            module, tokenizer, engine, dtype=engine_dtype(engine, compute_device(policy)),
            max_model_len=max_len, overlapped=overlapped,
        )  # fmt: skip

    head = head_size(module.config)  # type: ignore[arg-type]
    backend = None if tried else start_engine(model, head, start)
    if backend is None:
        backend = generation_backend(model, module, tokenizer)  # type: ignore[arg-type]
    backend.synced_version = weights_version(policy)  # type: ignore[attr-defined]
    return backend


def load_models(
    config: TrainConfig, dist: Distributed
) -> tuple[nn.Module, object, nn.Module | None, nn.Module | None, GenerationBackend]:
    """The policy, its tokenizer, the frozen reference, the critic and the generation
    engine, in the order GPU memory needs: the vLLM engine first, from the model's config
    alone (it reserves its share of the GPU at start, only if that share is free; then it
    sleeps, `start_engine_first`), then the trainer's models (under FSDP read into host
    memory and sharded onto the GPU unit by unit, `train.fsdp`), then the engine is synced.
    FSDP needs vLLM: the HF engine would generate with the sharded module itself."""
    seed = engine_seed(config.seed, dist.rank, dist.world_size)
    max_len, overlapped = config.rollout.max_total_tokens, config.overlap.enabled
    started = start_engine_first(
        config.model, config.policy, max_len, seed=seed, overlapped=overlapped
    )
    if started is None and dist.sharded:
        raise ConfigError(
            "policy.strategy=fsdp: generation needs the vLLM engine (model.backend=vllm, "
            "installed and starting); the HF engine would run the sharded module"
        )
    policy, tokenizer = load_policy(config.model, config.policy, sharded=dist.sharded)
    # β = 0 never calls the reference: no frozen copy (a second model's memory) is made.
    needs_reference = config.algo.kl_coef > 0
    reference = (
        frozen_reference(policy, lora=config.policy.lora_rank > 0) if needs_reference else None
    )
    critic = Critic(policy) if config.uses_critic else None
    engine = make_backend(
        config.model, policy, tokenizer, max_len, seed=seed, overlapped=overlapped,
        engine=started, tried=True,
    )  # fmt: skip
    return policy, tokenizer, reference, critic, engine


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
    the HF backend, the vLLM engine); LoRA policies are merged into a plain copy first. Only
    when they changed since the engine last saw them (`models.weights.weights_version`, read
    from torch's version counters: an evaluation after a step, or the next rollout after it,
    finds them unchanged), or when a sleeping engine discarded them. Collective for a
    sharded policy: every rank calls it.
    Generating with the policy module itself makes this a no-op."""
    if not isinstance(backend, WeightSyncable):
        return
    version = weights_version(policy)
    if backend.synced_version == version:
        return
    backend.sync_weights(merged_for_export(policy), version=version)


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
