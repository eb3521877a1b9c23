"""The entry point behind `searchrl sft`: the warm start (or an SFT baseline) from a config,
and, with meta examples or own rollouts, the Meta-Refiner's meta phase and its report. Writes
`DIR/model`, `DIR/metrics.jsonl`, `DIR/config.yaml` and `DIR/summary.json` (see `train.run`
for the folder layout)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from searchrl.config.sft import SFTConfig
from searchrl.train.environment import (
    TRAINED_QUESTIONS,
    build_environment,
    export_model,
    load_policy,
    make_backend,
    make_rollout_fn,
)
from searchrl.train.meta_sft import meta_report, warm_start_meta
from searchrl.train.metrics import MetricsWriter
from searchrl.train.models import use_bf16
from searchrl.train.run import progress_bar, seed_everything, set_threads, write_config
from searchrl.train.sft import (
    answer_token_weights,
    baseline_examples,
    observation_view,
    reference_trajectory,
    rejection_sample,
    run_sft,
    sft_step_count,
    solved_references,
)
from searchrl.train.sft_checkpoint import PhaseCheckpoints, saved_step
from searchrl.train.sft_checkpoint import remove as remove_checkpoints
from searchrl.types import Trajectory


def write_trained_questions(out_dir: Path, examples: list[Trajectory]) -> None:
    """`DIR/trained_questions.txt`: the ids (`train_12`) of the questions trained on."""
    ids = sorted({t.uid or t.id for t in examples})
    (out_dir / TRAINED_QUESTIONS).write_text("".join(f"{i}\n" for i in ids))


def sft(
    config: SFTConfig, out_dir: Path, progress: bool = True, resume: bool = False
) -> dict[str, float]:
    """Warm start (or baseline): SFT on reference or rejection-sampled trajectories; writes
    `DIR/model`, `DIR/metrics.jsonl` and `DIR/config.yaml`. Returns the last step's stats
    plus how many trajectories were used. `resume`: each phase continues from its newest
    checkpoint under `DIR/checkpoints/` (see `train.sft_checkpoint`); without it, any left
    there are discarded and the run starts afresh."""
    set_threads(config.policy.torch_threads)
    seed_everything(config.seed)
    write_config(config, out_dir)
    env = build_environment(config.data, out_dir, topk=config.rollout.topk, progress=progress)
    policy, tokenizer = load_policy(config.model, config.policy)
    use_chat = config.rollout.use_chat_template
    if config.source in ("references", "direct", "rag"):
        visible = observation_view(tokenizer, config.rollout.max_obs_tokens)
        refs = solved_references(env.references(config.data.train_split, visible))
        random.Random(config.seed).shuffle(refs)
        refs = refs[: config.max_examples]  # the same questions whatever the format
        if config.source == "references":
            rollout = config.rollout
            examples = [
                reference_trajectory(
                    r, tokenizer, use_chat, rollout.prompt_template, rollout.max_obs_tokens
                )
                for r in refs
            ]
        else:
            examples = baseline_examples(
                refs, config.source, tokenizer, use_chat, env.retriever, config.rollout.topk
            )
    else:
        backend = make_backend(
            config.model, policy, tokenizer, config.rollout.max_total_tokens, seed=config.seed
        )
        rollout = make_rollout_fn(backend, policy, tokenizer, env.retriever, config.rollout)
        pool = env.questions(config.data.train_split)[: config.max_examples]
        examples = rejection_sample(rollout, pool, config.rejection_samples, config.seed)
    write_trained_questions(out_dir, examples)
    writer = MetricsWriter(out_dir, tensorboard=False, wandb_project="", config=None)
    checkpoints = out_dir / "checkpoints"
    if not resume:
        remove_checkpoints(checkpoints)
        writer.truncate_after(-1)  # a fresh run into an old folder starts a fresh log
    pad_id = int(tokenizer.pad_token_id)  # type: ignore[attr-defined]
    bf16 = use_bf16(config.policy.autocast, policy)
    done = 0
    history: list[dict[str, float]] = []

    def train_phase(
        examples: list[Trajectory], weights: list[float], phase: SFTConfig, prefix: str
    ) -> None:
        nonlocal done
        total = sft_step_count(len(examples), phase)
        tokens = None
        if config.answer_weight != 1.0:
            tokens = [answer_token_weights(t, tokenizer, config.answer_weight) for t in examples]
        saves = PhaseCheckpoints(checkpoints / prefix, phase.save_every)
        resumed = saved_step(saves.root)
        if resume and resumed < total:  # rows after the checkpoint are redone
            writer.truncate_after(done + resumed)
        label = "SFT" if prefix == "sft" else "meta SFT"
        with progress_bar(progress, total, resumed, label) as bar:

            def log(step: int, stats: dict[str, float]) -> None:
                writer.write(done + step, _named(stats, prefix))
                if bar is not None:
                    loss, speed = stats["sft/loss"], stats["sft/tokens_per_s"]
                    description = f"loss={loss:.3f} · {speed:.0f} tokens/s"
                    bar.update(bar.task_ids[0], completed=step, description=description)

            stats = run_sft(policy, examples, pad_id, phase, bf16, log, weights, saves, tokens)
        history.extend(_named(s, prefix) for s in stats)
        done += total

    result: dict[str, float] = {}
    meta = bool(config.meta_examples or config.meta_rollouts or config.meta_rollouts_from)
    held_out: list[tuple[Trajectory, int]] = []
    if meta:
        result, held_out = warm_start_meta(
            config, env, policy, tokenizer, examples, train_phase, out_dir
        )
    else:
        train_phase(examples, [1.0] * len(examples), config, "sft")
    writer.close()
    export_model(policy, tokenizer, out_dir / "model")
    if meta:
        result.update(meta_report(config, env, policy, tokenizer, held_out, out_dir))
    actor = [h for h in history if "sft/loss" in h]
    result = {**(actor[-1] if actor else {}), "sft/examples": float(len(examples)), **result}
    (out_dir / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    remove_checkpoints(checkpoints)
    return result


def _named(stats: dict[str, float], prefix: str) -> dict[str, float]:
    """A phase's stats under its prefix (`sft/loss` → `meta_sft/loss`)."""
    return {k.replace("sft/", f"{prefix}/"): v for k, v in stats.items()}
