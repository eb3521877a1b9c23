"""The Search-R2 warm start of the Meta-Refiner: world-labelled meta examples, the model's own
rollouts labelled by the world's oracle, and how well the refiner reads held-out transcripts.

    phase 1   the Actor's reference trajectories (+ the synthetic meta examples when
              `meta_schedule: mixed`, each weighted like a whole sequence)
    rollouts  the phase-1 model rolls out train questions (`meta_rollouts`) and held-out ones
              (`meta_eval_size`) at the rollout temperature; the oracle labels every one
    phase 2   a meta phase: the synthetic examples (`meta_schedule: phase`) and the train
              rollouts, clean and flawed balanced, with Actor references replayed among
              them (`meta_replay`) so that the Actor keeps its own prompt
    report    the final model reads the held-out rollouts (never trained on), held-out
              synthetic transcripts, and held-out rollouts of the final model itself (the
              meta phase's replay moves the Actor, and RL reads the final Actor's
              transcripts): ROC-AUC, accuracy at τ, trimmer exact step

The train rollouts go first to the train questions the Actor was not taught: on the questions
of its own references an Actor is nearly always right, so its mistakes there are few and
unlike those it makes in RL on questions it has not seen.

Why so much: a meta example trains 2 tokens (the answer and EOS) against 100–150 for a
reference, so mixed in by token count it gets ~1% of the gradient and the model learns the
label frequency. Synthetic flaws teach the format and what a flaw looks like; only the model's
own rollouts show it its own mistakes, which are what it reads in RL.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from torch import nn

from searchrl.config.errors import ConfigError
from searchrl.config.refiner import RefinerConfig
from searchrl.config.sft import SFTConfig
from searchrl.data.world import Reference
from searchrl.data.world.corrupt import Corrupter
from searchrl.refiner.labelled import (
    checked_accuracy,
    confidence_accuracy,
    label_accuracy,
    meta_example,
    oracle_flaw,
)
from searchrl.refiner.refiner import MetaRefiner
from searchrl.retrieval.base import Retriever
from searchrl.reward.judges.symbolic import world_support
from searchrl.train.environment import Environment, make_backend, make_rollout_fn
from searchrl.train.metrics import save_trajectories
from searchrl.train.models import decoder_layers, top_layers_only, use_bf16
from searchrl.train.sft import reference_trajectory, solved_references
from searchrl.types import Question, Trajectory
from searchrl.utils.progress import progress_bar

Item = TypeVar("Item")
LogFn = Callable[[int, dict[str, float]], None]
ROLLOUT_CHUNK = 32
"""Questions per rollout call (bounds the batch the generation engine holds at once)."""


def labelled_references(
    references: Sequence[Reference],
    questions: Sequence[Question],
    n: int,
    clean_share: float,
    seed: int,
    retriever: Retriever,
) -> list[tuple[Reference, int]]:
    """`n` (transcript, earliest flawed step) pairs from the solved references: a
    `clean_share` of them clean (label 0), the others corrupted at a step drawn uniformly
    from 1..T (`data.world.corrupt`). References are reused, with other flaws, when `n`
    exceeds them. Seeded."""
    rng = random.Random(seed)
    pool = solved_references(references)
    if not pool or n == 0:
        return []
    corrupter = Corrupter(questions, retriever)
    n_clean = round(n * clean_share)
    order = [pool[i % len(pool)] for i in range(max(n, 1) * 4)]
    rng.shuffle(order)
    out: list[tuple[Reference, int]] = [(ref, 0) for ref in order[:n_clean]]
    for ref in order:
        if len(out) >= n:
            break
        flawed = corrupter.corrupt(ref, rng)
        if flawed is not None:
            out.append(flawed)
    rng.shuffle(out)
    return out


def oracle_labels(trajectories: Sequence[Trajectory], questions: Sequence[Question]) -> list[int]:
    """The world oracle's earliest flawed step of each finished trajectory (`oracle_flaw`)."""
    by_uid = {q.uid: q for q in questions}
    return [oracle_flaw(t, world_support(by_uid[t.uid].metadata)) for t in trajectories]


def balance(items: Sequence[tuple[Item, int]], seed: int) -> list[tuple[Item, int]]:
    """As many clean (label 0) as flawed items, the larger class subsampled (seeded)."""
    rng = random.Random(seed)
    clean = [x for x in items if x[1] == 0]
    flawed = [x for x in items if x[1] > 0]
    size = min(len(clean), len(flawed))
    out = rng.sample(clean, size) + rng.sample(flawed, size)
    rng.shuffle(out)
    return out


def sequence_weight(references: Sequence[Trajectory], meta: Sequence[Trajectory]) -> float:
    """The loss weight that makes a meta example weigh like an average reference: the mean
    trained tokens of a reference over those of a meta example."""
    ref = sum(sum(t.loss_mask()) for t in references) / max(len(references), 1)
    own = sum(sum(t.loss_mask(include_meta=True)) for t in meta) / max(len(meta), 1)
    return ref / own if own else 1.0


def replayed_references(
    config: SFTConfig,
    env: Environment,
    tokenizer: object,
    actor: Sequence[Trajectory],
    n_meta: int,
    own: Sequence[Trajectory] = (),
) -> list[Trajectory]:
    """`meta_replay` × `n_meta` Actor examples to train alongside the meta examples (see
    `SFTConfig.meta_replay`): with `meta_replay_from: rollouts` the Actor's `own` train
    rollouts, else its SFT examples, or the world's solved train references when it had no
    phase here; drawn without repeats until the pool is used up. Seeded."""
    n = round(config.meta_replay * n_meta)
    if n == 0:
        return []
    pool = list(own if config.meta_replay_from == "rollouts" else actor)
    if not pool:
        chat = config.rollout.use_chat_template
        solved = solved_references(env.references(config.data.train_split))
        pool = [reference_trajectory(r, tokenizer, chat) for r in solved]
    if not pool:
        return []
    rng = random.Random(config.seed + 2)
    out: list[Trajectory] = []
    while len(out) < n:
        out += rng.sample(pool, min(len(pool), n - len(out)))
    return out


def rollout_questions(
    questions: Sequence[Question], taught: set[str], n: int
) -> tuple[list[Question], int]:
    """The train questions to roll out and samples per question for `n` rollouts: the
    questions not in `taught` (uids of the Actor's own examples) first, in order, then the
    taught ones; as few samples per question as cover `n` with all of them."""
    ordered = [q for q in questions if q.uid not in taught] + [
        q for q in questions if q.uid in taught
    ]
    per_question = math.ceil(n / max(len(ordered), 1))
    return ordered[: math.ceil(n / max(per_question, 1))], per_question


def labelled_rollouts(
    config: SFTConfig,
    env: Environment,
    policy: nn.Module,
    tokenizer: object,
    jobs: Sequence[tuple[Question, int, int]],
    label: str,
) -> list[tuple[Trajectory, int]]:
    """Rolls out every (question, samples, seed) job at the rollout temperature, in chunks
    of `ROLLOUT_CHUNK` questions, and labels each rollout with the oracle (also kept as
    `metrics["flaw_step"]`, so saved rollouts carry their labels). A vLLM engine's one
    stream starts from the first job's seed, so calls with other seeds draw differently."""
    seed = jobs[0][2] if jobs else config.seed
    backend = make_backend(
        config.model, policy, tokenizer, config.rollout.max_total_tokens, seed=seed
    )
    rollout = make_rollout_fn(backend, policy, tokenizer, env.retriever, config.rollout)
    out: list[Trajectory] = []
    with progress_bar(label, len(jobs), unit="questions") as advance:
        for start in range(0, len(jobs), ROLLOUT_CHUNK):
            chunk = jobs[start : start + ROLLOUT_CHUNK]
            for samples, seed in dict.fromkeys((n, s) for _, n, s in chunk):
                qs = [q for q, n, s in chunk if (n, s) == (samples, seed)]
                out += rollout(qs, n_samples=samples, seed=seed, greedy=False)
            advance(len(chunk))
    close = getattr(backend, "close", None)
    if callable(close):
        close()
    labels = oracle_labels(out, [q for q, _, _ in jobs])
    for traj, label in zip(out, labels, strict=True):
        traj.metrics["flaw_step"] = float(label)
    return list(zip(out, labels, strict=True))


def mean_em(pairs: Sequence[tuple[Trajectory, int]]) -> float:
    """The rollouts' mean exact match (0 for none)."""
    return sum(t.metrics.get("em", 0.0) for t, _ in pairs) / max(len(pairs), 1)


def own_rollouts(
    config: SFTConfig, env: Environment, policy: nn.Module, tokenizer: object, taught: set[str]
) -> tuple[list[tuple[Trajectory, int]], list[tuple[Trajectory, int]]]:
    """The model's rollouts on train questions (`meta_rollouts`, untaught ones first: see
    `rollout_questions`) and held-out ones (`meta_eval_size`), each with the oracle's label."""
    train_qs, per_question = rollout_questions(
        env.questions(config.data.train_split), taught, config.meta_rollouts
    )
    held_qs = env.questions(config.data.eval_split)[: config.meta_eval_size]
    jobs = [(q, per_question, config.seed) for q in train_qs]
    jobs += [(q, 1, config.seed + 1) for q in held_qs]
    pairs = labelled_rollouts(config, env, policy, tokenizer, jobs, "own rollouts")
    held = {q.uid for q in held_qs}
    return [p for p in pairs if p[0].uid not in held], [p for p in pairs if p[0].uid in held]


def saved_rollouts(
    run_dirs: Sequence[Path], env: Environment, config: SFTConfig
) -> tuple[list[tuple[Trajectory, int]], list[tuple[Trajectory, int]]]:
    """The own rollouts earlier warm starts kept (`meta_rollouts_from`), train and held-out,
    pooled in folder order, with their oracle labels. Refuses rollouts whose questions are
    not this world's train and held-out questions (labels from another world would be
    wrong)."""
    out: list[list[tuple[Trajectory, int]]] = [[], []]
    for run_dir in run_dirs:
        for pooled, name, split in (
            (out[0], "meta_train", config.data.train_split),
            (out[1], "meta_held_out", config.data.eval_split),
        ):
            path = run_dir / "trajectories" / f"{name}.jsonl"  # SFTConfig.validate: it exists
            trajs = [Trajectory.from_json(json.loads(line)) for line in path.open() if line.strip()]
            known = {q.uid for q in env.questions(split)}
            stray = [t.uid for t in trajs if t.uid not in known or "flaw_step" not in t.metrics]
            if stray:
                raise ConfigError(
                    f"meta_rollouts_from: {path} has {len(stray)} rollouts that are not "
                    f"labelled questions of {env.world_dir}'s {split} split (first: {stray[0]})"
                )
            pooled.extend((t, int(t.metrics["flaw_step"])) for t in trajs)
    return out[0], out[1]


def warm_start_meta(
    config: SFTConfig,
    env: Environment,
    policy: nn.Module,
    tokenizer: object,
    actor: list[Trajectory],
    train: Callable[[list[Trajectory], list[float], SFTConfig, str], None],
    out_dir: Path | None = None,
) -> tuple[dict[str, float], list[tuple[Trajectory, int]]]:
    """Phases 1 and 2 and the report (module docstring). `actor` are the Actor's SFT
    examples (none: phase 1 is skipped, the policy is an Actor already);
    `train(examples, weights, config, prefix)` runs one SFT phase and logs it under
    `prefix`. The own rollouts go to `out_dir/trajectories/meta_{train,held_out}.jsonl`, each
    with its oracle label as `metrics["flaw_step"]`. Returns counts (`meta/*`) and the
    held-out own rollouts with their labels, for `meta_report`."""
    if config.meta_train_layers:  # refused now, not after the Actor phase and the rollouts
        try:
            decoder_layers(policy, config.meta_train_layers)
        except ValueError as err:
            raise ConfigError(f"meta_train_layers: {err}") from None
    own_train: list[tuple[Trajectory, int]] = []
    held_out: list[tuple[Trajectory, int]] = []
    if config.meta_rollouts_from:  # read first: a wrong folder fails before any training
        own_train, held_out = saved_rollouts(config.rollout_folders(), env, config)
    taught = {t.uid for t in actor}
    chat = config.rollout.use_chat_template
    train_split = config.data.train_split
    labelled = labelled_references(
        env.references(train_split), env.questions(train_split), config.meta_examples,
        config.meta_clean_share, config.seed, env.retriever,
    )  # fmt: skip
    synthetic = [
        meta_example(tokenizer, reference_trajectory(r, tokenizer, chat), label)
        for r, label in labelled
    ]
    weight = sequence_weight(actor, synthetic) if config.meta_weight == "sequence" else 1.0
    mixed = synthetic if config.meta_schedule == "mixed" and actor else []
    if actor:
        train([*actor, *mixed], [1.0] * len(actor) + [weight] * len(mixed), config, "sft")
    if config.meta_rollouts_from or config.meta_rollouts > 0 or config.meta_eval_size > 0:
        if not config.meta_rollouts_from:
            own_train, held_out = own_rollouts(config, env, policy, tokenizer, taught)
        for name, pairs in (("meta_train", own_train), ("meta_held_out", held_out)):
            if out_dir is not None:
                save_trajectories(out_dir / "trajectories" / f"{name}.jsonl", [t for t, _ in pairs])
    kept = balance(own_train, config.seed)
    phase = [] if mixed else list(synthetic)  # a copy: `synthetic` is counted below
    phase += [meta_example(tokenizer, t, label) for t, label in kept]
    replay: list[Trajectory] = []
    if phase:
        rollouts = [t for t, _ in own_train]
        replay = replayed_references(config, env, tokenizer, actor, len(phase), rollouts)
        weight = sequence_weight(replay, phase) if replay else 1.0
        examples = [(t, weight) for t in phase] + [(t, 1.0) for t in replay]
        random.Random(config.seed).shuffle(examples)
        meta_config = replace(config, epochs=config.meta_epochs, lr=config.meta_lr)
        with top_layers_only(policy, config.meta_train_layers):
            train([t for t, _ in examples], [w for _, w in examples], meta_config, "meta_sft")
    counts = {
        f"meta/replayed_{config.meta_replay_from}": float(len(replay)),
        "meta/synthetic_examples": float(len(synthetic)),
        "meta/rollout_examples": float(len(kept)),
        "meta/rollouts": float(len(own_train)),
        "meta/rollouts_flawed_share": sum(y > 0 for _, y in own_train) / max(len(own_train), 1),
        "meta/rollouts_taught_share": sum(t.uid in taught for t, _ in own_train)
        / max(len(own_train), 1),
        "meta/rollouts_em": mean_em(own_train),
    }
    return counts, held_out


def report_reader(
    config: SFTConfig, env: Environment, policy: nn.Module, tokenizer: object
) -> MetaRefiner:
    """The refiner that reads held-out transcripts for a report: on the module, as RL reads
    (bf16 where `policy.autocast` turns it on), with the content-free prior, so that a
    reading carries both the raw log-odds and the calibrated score, and with the trimmer's
    surprisal tilt (β = 1), reported beside the paper's π_h."""
    return MetaRefiner(
        policy, tokenizer, None, env.retriever, config.rollout,
        RefinerConfig(calibration="content_free", trim_surprisal=1.0),
        int(tokenizer.pad_token_id),  # type: ignore[attr-defined]
        bf16=use_bf16(config.policy.autocast, policy),
    )  # fmt: skip


def meta_report(
    config: SFTConfig,
    env: Environment,
    policy: nn.Module,
    tokenizer: object,
    held_out: Sequence[tuple[Trajectory, int]],
    out_dir: Path | None = None,
) -> dict[str, float]:
    """How the warm-started refiner (τ = 0) reads the held-out own rollouts (`meta/*`) and as
    many held-out corrupted references (`meta/synthetic/*`); every reading (label, answer
    log-probs, prior) goes to `out_dir/meta_readings.jsonl`. `meta/final/*` read the final
    model's own rollouts of the same held-out questions (`meta_final_rollouts`; kept in
    `out_dir/trajectories/meta_final_held_out.jsonl`): the Actor RL starts from, which the
    meta phase's replay has trained further than the one that rolled out `held_out`. Read
    as RL reads (bf16 where `policy.autocast` turns it on), with the content-free prior so
    that both scores are reported: `*_raw` are the default refiner's (`calibration: none`),
    the others those of `calibration: content_free`."""
    chat = config.rollout.use_chat_template
    eval_split = config.data.eval_split
    report: dict[str, float] = {}
    refiner = report_reader(config, env, policy, tokenizer)
    synthetic_held = labelled_references(
        env.references(eval_split), env.questions(eval_split), config.meta_eval_size,
        config.meta_clean_share, config.seed + 1, env.retriever,
    )  # fmt: skip
    final: list[tuple[Trajectory, int]] = []
    if config.meta_final_rollouts and held_out:
        questions = {q.uid: q for q in env.questions(eval_split)}
        held_qs = [questions[uid] for uid in dict.fromkeys(t.uid for t, _ in held_out)]
        jobs = [(q, 1, config.seed + 1) for q in held_qs]
        final = labelled_rollouts(config, env, policy, tokenizer, jobs, "final rollouts")
        if out_dir is not None:
            path = out_dir / "trajectories" / "meta_final_held_out.jsonl"
            save_trajectories(path, [t for t, _ in final])
        report["meta/final/em"] = mean_em(final)
    if held_out:
        report["meta/em"] = mean_em(held_out)
    sets = {
        "meta/": ([t for t, _ in held_out], [y for _, y in held_out]),
        "meta/final/": ([t for t, _ in final], [y for _, y in final]),
        "meta/synthetic/": (
            [reference_trajectory(r, tokenizer, chat) for r, _ in synthetic_held],
            [y for _, y in synthetic_held],
        ),
    }
    lines = []
    for prefix, (trajs, labels) in sets.items():
        if not trajs:
            continue
        readings = refiner.read(trajs)
        found = label_accuracy(readings, labels, 0.0) | confidence_accuracy(trajs, labels)
        if prefix != "meta/synthetic/":  # references record no search results to check
            found |= checked_accuracy(trajs, readings, labels)
        report.update({k.replace("meta/", prefix): v for k, v in found.items()})
        for traj, label, r in zip(trajs, labels, readings, strict=True):
            if r is not None:
                row = {"set": prefix, "id": traj.id, "label": label, "prior": r.prior}
                lines.append(json.dumps({**row, "logprobs": r.logprobs}))
    if out_dir is not None:
        (out_dir / "meta_readings.jsonl").write_text("".join(x + "\n" for x in lines))
    return report
