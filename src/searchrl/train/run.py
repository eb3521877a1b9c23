"""Entry points behind `searchrl train` and `searchrl sft`: build everything from a config,
run, and write the run folder:

    DIR/config.yaml            the resolved config
    DIR/metrics.jsonl          one JSON object per step (`step` + metrics)
    DIR/tensorboard/           the same metrics for TensorBoard
    DIR/checkpoints/step_N/    exact-resume checkpoints (atomic; `LATEST` names the newest)
    DIR/trajectories/          each step's rollouts and each evaluation's trajectories
    DIR/model/                 the final policy as a plain HF directory (+ tokenizer)

`searchrl sft` lives in `train.run_sft` and shares this module's set-up helpers.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from searchrl.config.loading import to_dict
from searchrl.config.model import ModelConfig
from searchrl.config.train import PolicyConfig, TrainConfig
from searchrl.models.generation import GenerationBackend, WeightSyncable
from searchrl.refiner import MetaRefiner
from searchrl.reward.judges import CachedJudge, make_judge
from searchrl.reward.outcome import RewardFn
from searchrl.reward.scoring import make_reward
from searchrl.rollout.runner import MeteredBackend
from searchrl.train import checkpoint as ckpt
from searchrl.train import fsdp
from searchrl.train.distill import distill
from searchrl.train.environment import (
    build_environment,
    export_model,
    load_models,
    make_rollout_fn,
)
from searchrl.train.loop import Trainer
from searchrl.train.memory_plan import check_plan
from searchrl.train.metrics import MetricsWriter, save_trajectories
from searchrl.train.models import use_bf16
from searchrl.train.overlap import OverlappedRollout, SharedEngine, attach
from searchrl.train.pool import check_disjoint, gold_retrieved, probe_questions, screen
from searchrl.train.ports import Distributed
from searchrl.types import Question, Trajectory
from searchrl.utils.progress import LineProgress
from searchrl.utils.progress import progress_bar as progress_bar_eta


def set_threads(threads: int) -> None:
    """Apply `policy.torch_threads` (0 keeps the count the command chose at start)."""
    if threads > 0:
        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Python, NumPy and torch RNGs (initialisation of the critic head, dropout, shuffles)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup_distributed(policy: PolicyConfig | None = None) -> Distributed:
    """One process, or this rank of an `accelerate launch` (gloo on CPU, NCCL on GPU): DDP,
    or FSDP when `policy.strategy` says so (torch's `fully_shard`, see `train.fsdp`)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    if accelerator.num_processes == 1:
        return Distributed()

    def reduce(value: int, op: str) -> int:
        tensor = torch.tensor([value], dtype=torch.long, device=accelerator.device)
        ops = {"sum": torch.distributed.ReduceOp.SUM, "min": torch.distributed.ReduceOp.MIN}
        torch.distributed.all_reduce(tensor, op=ops[op])
        return int(tensor.item())

    if policy is not None and policy.strategy == "fsdp":
        offload = policy.fsdp_cpu_offload
        return Distributed(
            rank=accelerator.process_index,
            world_size=accelerator.num_processes,
            wrap=lambda module: fsdp.shard(module, offload),
            barrier=accelerator.wait_for_everyone,
            reduce=reduce,
            sharded=True,
        )
    return Distributed(
        rank=accelerator.process_index,
        world_size=accelerator.num_processes,
        wrap=accelerator.prepare_model,
        barrier=accelerator.wait_for_everyone,
        reduce=reduce,
    )


def exit_ranks() -> None:
    """End a rank of a multi-process run with exit status 0, skipping interpreter teardown;
    a no-op in a single process. Call it once this rank's work is written and closed.

    Why: every gloo work item holds the Python context of the call that queued it, so the
    gloo thread that releases a finished collective takes the GIL. When the main thread is
    already tearing the interpreter down, that thread is told to exit mid-destructor and
    the C++ runtime aborts the process (SIGABRT after the run succeeded). Destroying the
    process group first does not help while DDP (and accelerate) still hold it."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    os._exit(0)


def write_config(config: object, out_dir: Path) -> None:
    """The resolved config, as YAML, next to the metrics it produced."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


@contextmanager
def progress_bar(
    enabled: bool, total: int, done: int, label: str
) -> Iterator[Progress | LineProgress | None]:
    """A rich progress bar (or nothing, e.g. in tests and on non-zero ranks); plain lines
    where no terminal can redraw it (`LineProgress`)."""
    if not enabled:
        yield None
        return
    console = Console(stderr=True)
    if not console.is_terminal:
        yield LineProgress(label, total, done, stream=console.file)
        return
    columns = (TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.description}"))  # fmt: skip
    with Progress(*columns, console=console) as progress:
        progress.add_task("", total=total, completed=done)
        yield progress


class LiveStep:
    """What the RL bar says while a step runs (a CPU step takes minutes): the step, the stage
    it is in, and the turns generated so far, after the last step's summary."""

    def __init__(
        self, bar: Progress | LineProgress | None, summary: Callable[[dict[str, float]], str]
    ) -> None:
        self.bar, self.summary = bar, summary
        self.step, self.name, self.generated, self.last = 0, "", 0, ""

    def start(self, step: int, metrics: dict[str, float]) -> None:
        self.step, self.generated, self.last = step, 0, self.summary(metrics)
        self.stage("gen")

    def stage(self, name: str) -> None:
        self.name = name
        self._show()

    def turns(self, n: int) -> None:
        self.generated += n
        self._show()

    def _show(self) -> None:
        if self.bar is None:
            return
        now = f"step {self.step}: {self.name}"
        if self.name in ("gen", "refine"):
            now += f" ({self.generated} turns)"
        text = f"{now}  | {self.last}" if self.last else now
        self.bar.update(self.bar.task_ids[0], description=text)


def evaluate_with_progress(
    trainer: Trainer,
    backend: MeteredBackend,
    questions: list[Question],
    config: TrainConfig,
    show: bool,
) -> tuple[dict[str, float], list[Trajectory]]:
    """`trainer.evaluate` under a bar of generated turns (the total is the most turns the
    questions can take, so the bar may jump to the end), since an evaluation of a few dozen
    questions runs for minutes on a CPU."""
    turns = len(questions) * (config.rollout.max_turns + 1)
    with (
        progress_bar_eta("held-out evaluation", turns, enabled=show, unit="turns") as tick,
        backend.reporting(tick),
    ):
        return trainer.evaluate(questions)


def build_reward(
    config: TrainConfig,
    questions: list[Question],
    backend: GenerationBackend,
    tokenizer: object,
) -> RewardFn:
    """The configured reward. Search-R2's hybrid gets its judge here: `local` runs on the
    policy's own generation engine unless `reward.local_judge.model` names another model,
    which is then loaded on the policy's device."""
    reward = config.reward
    judge: CachedJudge | None = None
    if reward.kind == "hybrid" and reward.process and reward.judge == "local":
        if reward.local_judge.model:
            from searchrl.models.loading import load_policy as load_generator

            model = ModelConfig(name_or_path=reward.local_judge.model, device=config.model.device)
            loaded = load_generator(model, max_model_len=config.rollout.max_total_tokens)
            backend, tokenizer = loaded.backend, loaded.tokenizer
        judge = make_judge(reward, backend, tokenizer)
    return make_reward(reward, {q.uid: q for q in questions}, judge)


def engine_metrics(engine: object, overlapped: OverlappedRollout | None) -> dict[str, float]:
    """Seconds the last weight sync took (engines that time it: vLLM; 0 when the weights had
    not changed) and, with overlap, the staleness of the step's rollouts and the trainer's
    wait for them."""
    if overlapped is not None:
        return overlapped.metrics()
    seconds = getattr(engine, "last_sync_s", None)
    return {} if seconds is None else {"timing_s/weight_sync": float(seconds)}


def _summary(metrics: dict[str, float]) -> str:
    keys = ("critic/score/mean", "val/em", "env/number_of_valid_search", "timing_s/step")
    return " ".join(f"{k.split('/')[-2] if k.count('/') > 1 else k}={metrics[k]:.3g}"
                    for k in keys if k in metrics)  # fmt: skip


def on_stage(stage: str, live: LiveStep, engine: GenerationBackend) -> None:
    """Each stage of a step as it starts: shown on the bar, and once the rollouts are
    collected (`ref`, the first stage of the update) the engine hands its GPU memory back
    until the next sync (vLLM's sleep mode, where it sleeps)."""
    live.stage(stage)
    if stage == "ref" and isinstance(engine, WeightSyncable):
        engine.release()


def train(config: TrainConfig, out_dir: Path, resume: bool = False) -> dict[str, float]:
    """Run RL training to `config.steps`; returns the last step's metrics (with the final
    held-out evaluation when `data.eval_size > 0`)."""
    dist = setup_distributed(config.policy)
    main = dist.rank == 0
    if config.distill.every and dist.world_size > 1:
        raise ValueError("distill.every: self-distillation runs in one process only")
    check_plan(config)  # on GPUs: refused here, before anything loads, if it cannot fit
    set_threads(config.policy.torch_threads)
    seed_everything(config.seed)
    if main:
        write_config(config, out_dir)
    dist.barrier()
    env = build_environment(
        config.data, out_dir, topk=config.rollout.topk, progress=config.logging.progress and main
    )
    policy, tokenizer, reference, critic, engine = load_models(config, dist)
    shared = SharedEngine(engine) if config.overlap.enabled else None
    backend = MeteredBackend(shared if shared is not None else engine)
    rollout = make_rollout_fn(
        backend, policy, tokenizer, env.retriever, config.rollout, sync=shared is None
    )
    pad_id = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]
    questions = env.training_pool(config.data)
    if config.screen.gold_retrieved:
        questions = gold_retrieved(questions, env.retriever, config.rollout.topk)
    probe = probe_questions(config, env.questions)
    check_disjoint(questions, probe)
    size = config.data.eval_size
    held_out = env.questions(config.data.eval_split)[:size] if size > 0 else []
    reward = build_reward(config, [*questions, *held_out, *probe], backend.backend, tokenizer)
    questions, start_row = screen(questions, rollout, reward, policy, config, out_dir, dist)
    refiner = None
    if config.refiner.enabled:
        refiner = MetaRefiner(
            policy, tokenizer, backend, env.retriever, config.rollout, config.refiner, pad_id,
            bf16=use_bf16(config.policy.autocast, policy),
        ).refine  # fmt: skip
    trainer = Trainer(
        config, policy, critic, reference, pad_id, rollout, reward, questions, dist, refiner,
        probe_questions=probe,
    )  # fmt: skip
    overlapped = attach(trainer, shared, rollout, policy) if shared is not None else None
    ckpt_root = out_dir / "checkpoints"
    wandb = config.logging.wandb_project if main else ""
    writer = MetricsWriter(out_dir, config.logging.tensorboard and main, wandb, to_dict(config))
    latest = ckpt.latest_checkpoint(ckpt_root) if resume else None
    if latest is not None:
        trainer.restore(latest)
        if main:
            writer.truncate_after(trainer.step_count)
    elif main:
        writer.truncate_after(-1)  # a fresh run into an old folder starts a fresh log
    show = config.logging.progress and main

    def evaluate() -> tuple[dict[str, float], list[Trajectory]]:
        return evaluate_with_progress(trainer, backend, held_out, config, show)

    def probe_into(row: dict[str, float], step: int) -> None:
        found, trajs = trainer.meter.run_probe(rollout, policy, trainer.hops)
        row.update(found)
        if main:
            save_trajectories(out_dir / "trajectories" / f"probe_step_{step}.jsonl", trajs)

    # Sharded weights are gathered collectively for generation: every rank evaluates then.
    evaluates = main or dist.sharded
    if latest is None:
        if evaluates and held_out:
            found, trajs = evaluate()
            start_row.update(found)
            if main:
                save_trajectories(out_dir / "trajectories" / "eval_step_0.jsonl", trajs)
        if evaluates and trainer.meter.probe_due(0, last=False):
            probe_into(start_row, 0)
        if main and start_row:
            writer.write(0, start_row)
    metrics = {}
    with progress_bar(config.logging.progress and main, config.steps, trainer.step_count,
                      "RL") as bar:  # fmt: skip
        live = LiveStep(bar, _summary)
        trainer.on_stage = lambda stage: on_stage(stage, live, engine)
        while trainer.step_count < config.steps:
            live.start(trainer.step_count + 1, metrics)
            with backend.reporting(live.turns):
                metrics, trajs = trainer.step()
            metrics.update(engine_metrics(engine, overlapped))
            step = trainer.step_count
            last = step == config.steps
            if main and config.logging.save_trajectories:
                save_trajectories(out_dir / "trajectories" / f"step_{step}.jsonl", trajs)
            if config.distill.every and step % config.distill.every == 0 and not last:
                live.stage("distil")
                metrics.update(distill(policy, config, out_dir / "trajectories", step,
                                       trainer.hops, pad_id, trainer.settings.bf16))  # fmt: skip
            if evaluates and trainer.meter.probe_due(step, last):
                probe_into(metrics, step)
            every = config.eval_every
            if evaluates and held_out and (last or (every > 0 and step % every == 0)):
                val, val_trajs = evaluate()
                metrics.update(val)
                if main:
                    path = out_dir / "trajectories" / f"eval_step_{step}.jsonl"
                    save_trajectories(path, val_trajs)
            dist.barrier()
            saving = last or step % max(config.save_every, 1) == 0
            if saving and dist.sharded:
                trainer.save(ckpt_root)  # every rank writes its shard
            if main:
                writer.write(step, metrics)
                if saving and not dist.sharded:
                    trainer.save(ckpt_root)
            dist.barrier()
            if bar is not None:
                bar.update(bar.task_ids[0], completed=step, description=_summary(metrics))
    writer.close()
    if overlapped is not None:
        overlapped.close()
    close = getattr(engine, "close", None)
    if callable(close):  # vLLM: stop its processes now, not at interpreter exit
        close()
    if dist.sharded:
        weights = fsdp.full_state_dict(policy, main)
        if main:
            export_model(policy, tokenizer, out_dir / "model", state_dict=weights)
    elif main:
        export_model(policy, tokenizer, out_dir / "model")
    return metrics
