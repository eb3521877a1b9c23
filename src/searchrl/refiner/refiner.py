"""Algorithm 1 of Search-R2 (seed 001): accept or cut and regenerate, at most N_max times.

    for n in 0..N_max−1:  read every open trajectory under the meta prompt (batched);
                          accepted ones are final; the others are cut at the trimmer's k
                          and regenerated from step k by the Actor (one batched rollout)

The Meta-Refiner is the policy itself (same weights) under another prompt. Its decisions are
recorded on the trajectory (`Trajectory.refinement`): each reading's meta prompt, the decision
as a `meta` segment of the exact candidate tokens, the log-odds, and the cut.

Departures, on purpose:
- A regeneration is sampled with its own seed per round (`regeneration_seed`): the rollout
  engine seeds each turn from (seed, trajectory id, turn), so the step's own seed would
  reproduce the very suffix that was cut away. It is sampled at the rollout temperature even
  when the first pass was greedy (evaluation), for the same reason, or at
  `refiner.regen_temperature` where that is set.
- For the diagnostics the paper proposes but never measured, two probes run after refining
  (generated, scored, never trained on): a share of the accepted trajectories is trimmed too
  (J_trim for the selection precision A_prec), and every trajectory trimmed in the first round
  is also regenerated, with the same seed, from a baseline cut drawn from the trimmer's
  batch-average cut distribution (S_trim's no-skill baseline; `refiner.probes`). Their time
  is reported apart from the refiner's.
- Discriminator calibration (`refiner.calibration`, see `refiner.meta`).
- Under `discriminator: confidence`, no decision trained, only the trimmer reads (`read_needed`).
- `trimmer: checked` cuts at the earliest step a check of the transcript shows wrong.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.models.generation import GenerationBackend
from searchrl.models.weights import compute_device
from searchrl.refiner.confidence import confidence_score, trim_tilt
from searchrl.refiner.meta import Reading, logsumexp
from searchrl.refiner.outcome import RefineOutcome
from searchrl.refiner.probes import run_probes
from searchrl.refiner.rule import checked_step, rule_revise
from searchrl.refiner.scoring import candidate_ids, candidate_logprobs
from searchrl.refiner.steps import (
    content_free_text,
    cut_before,
    meta_prompt,
    regeneration_seed,
    render_meta,
    split_steps,
    step_action,
)
from searchrl.retrieval.base import Retriever
from searchrl.rollout.loop import run_rollouts
from searchrl.rollout.sampler import row_seed
from searchrl.types import MetaDecision, Question, Refinement, Segment, Trajectory


class MetaRefiner:
    """Reads trajectories with the policy's weights and repairs the rejected ones (without a
    generation backend it can only read: the warm start's accuracy check; without the module,
    `model=None`, it reads on an engine that scores, vLLM, as evaluation on vLLM does)."""

    def __init__(
        self,
        model: nn.Module | None,
        tokenizer: object,
        backend: GenerationBackend | None,
        retriever: Retriever,
        rollout: RolloutConfig,
        config: RefinerConfig,
        pad_id: int,
        *,
        bf16: bool = False,
    ) -> None:
        """`bf16`: read under bf16 autocast, as the trainer's forwards run where
        `policy.autocast` turns it on (the decision is then trained at the precision it was
        read at, and the reading, a full forward of each transcript, costs less)."""
        self.model, self.tokenizer, self.backend = model, tokenizer, backend
        self.retriever, self.rollout_config, self.config = retriever, rollout, config
        self.pad_id, self.bf16 = pad_id, bf16

    @property
    def micro_batch_size(self) -> int:
        """Meta prompts per scoring pass: `config.micro_batch_size`, or by device when 0."""
        if self.config.micro_batch_size:
            return self.config.micro_batch_size
        if self.model is None:
            return 1
        return 1 if compute_device(self.model).type == "cpu" else 4

    @property
    def baseline_cuts(self) -> bool:
        """Whether trims get a baseline-cut twin (`random_cut_probe`). Not for `trimmer:
        first`: its batch-average cut is step 1 too, so the twin would regenerate the trim
        itself, same cut, same seed (S_trim is 0 by construction and is not logged)."""
        return self.config.random_cut_probe and self.config.trimmer != "first"

    @property
    def probes_on(self) -> bool:
        """Whether the diagnostic probes regenerate anything (a share of the accepted is
        trimmed, or trims get a baseline-cut twin)."""
        return self.config.probe_share > 0 or self.baseline_cuts

    def read(self, trajectories: Sequence[Trajectory]) -> list[Reading | None]:
        """Each trajectory's meta prompt and answer log-probs (None for one without a step),
        all scored in `config.micro_batch_size`-sized forward passes; under
        `calibration: content_free` the content-free prompt of every step count present is
        scored in the same passes and its log-odds become the readings' `prior`."""
        prompts, cands, where = [], [], []
        for index, traj in enumerate(trajectories):
            steps = split_steps(traj.segments)
            if steps:
                prompts.append(meta_prompt(self.tokenizer, traj.question, steps))
                cands.append(candidate_ids(self.tokenizer, len(steps)))
                where.append(index)
        readings: list[Reading | None] = [None] * len(trajectories)
        if not prompts:
            return readings
        lengths = sorted({len(c) - 1 for c in cands})
        if self.config.calibration == "content_free":
            for n_steps in lengths:
                prompts.append(render_meta(self.tokenizer, content_free_text(n_steps)))
                cands.append(candidate_ids(self.tokenizer, n_steps))
        scores = self._score([ids for _, ids in prompts], cands)
        priors = dict.fromkeys(lengths, 0.0)
        if self.config.calibration == "content_free":
            for n_steps, logp in zip(lengths, scores[len(where) :], strict=True):
                priors[n_steps] = logsumexp(logp[1:]) - logp[0]
        n = len(where)
        for index, (text, ids), cand, logp in zip(
            where, prompts[:n], cands[:n], scores[:n], strict=True
        ):
            traj = trajectories[index]
            tilt = trim_tilt(traj, self.config.trim_surprisal)
            prior = priors[len(cand) - 1]
            readings[index] = Reading(text, ids, cand, logp, prior, tilt, self._checked(traj))
        return readings

    def read_needed(self, trajectories: Sequence[Trajectory], probe: bool) -> list[Reading | None]:
        """`read`, but only where a reading is used. The confidence discriminator decides on
        the Actor's own log-probabilities, so with no decision trained (`joint` off) only the
        trimmer reads: the trajectories it cuts, and with `probe` also the accepted ones (the
        probes trim them, and S_trim's baseline averages π_h over the batch); a trimmer that
        does not read (`first`, `random`, `checked` where a check fired) reads none. The rest
        get an unread reading (T and the candidates, NaN log-probs) at no forward pass."""
        if self.config.discriminator != "confidence" or self.config.joint:
            return self.read(trajectories)
        trimmer = self.config.trimmer
        margin = self.config.margin
        wanted = [
            (trimmer == "model" or (trimmer == "checked" and not self._checked(t)))
            and (probe or self._confidence(t) > margin)
            for t in trajectories
        ]
        pairs = list(zip(trajectories, wanted, strict=True))
        read = iter(self.read([t for t, want in pairs if want]))
        return [next(read) if want else self._unread(t) for t, want in pairs]

    def _confidence(self, traj: Trajectory) -> float:
        """The Actor's log surprisal ratio, −inf where no log-probabilities were recorded."""
        value = confidence_score(traj, self.config.confidence_threshold)
        return -math.inf if value is None else value

    def _checked(self, traj: Trajectory) -> int:
        """The checked trimmer's step (`checked_step`; 0: none fired), 0 for other trimmers."""
        return checked_step(traj) if self.config.trimmer == "checked" else 0

    def _unread(self, traj: Trajectory) -> Reading | None:
        """A reading without the meta prompt's forward pass (None for a stepless trajectory,
        as `read` gives): what a decision that does not read still records."""
        steps = len(split_steps(traj.segments))
        if not steps:
            return None
        cands = candidate_ids(self.tokenizer, steps)
        return Reading("", [], cands, [math.nan] * (steps + 1), checked=self._checked(traj))

    def _score(self, prompts: list[list[int]], cands: list[list[list[int]]]) -> list[list[float]]:
        """The candidates' log-probs: on the generation engine where `config.read_on_engine`
        and the engine can score (vLLM: `score`) and the prompt fits its context, else with
        the policy module (under bf16 autocast when `bf16`)."""
        scores: list[list[float]] = [[] for _ in prompts]
        engine = getattr(self.backend, "score", None) if self.config.read_on_engine else None
        limit = getattr(self.backend, "max_model_len", None) or 0
        fits = [len(p) + max(map(len, c)) <= limit for p, c in zip(prompts, cands, strict=True)]
        if not callable(engine):
            fits = [False] * len(prompts)
        on_engine = [i for i, fit in enumerate(fits) if fit]
        rest = [i for i, fit in enumerate(fits) if not fit]
        if on_engine:
            read = engine([prompts[i] for i in on_engine], [cands[i] for i in on_engine])
            for i, logp in zip(on_engine, read, strict=True):
                scores[i] = logp
        if rest and self.model is None:
            raise ValueError(
                f"{len(rest)} meta prompts cannot be read on the generation engine (it cannot "
                "score, or the prompt is longer than its context, max_model_len "
                f"{limit}) and no policy module was loaded to read them"
            )
        if rest:
            assert self.model is not None
            device = compute_device(self.model)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                read = candidate_logprobs(
                    self.model, [prompts[i] for i in rest], [cands[i] for i in rest],
                    self.pad_id, self.micro_batch_size,
                )  # fmt: skip
            for i, logp in zip(rest, read, strict=True):
                scores[i] = logp
        return scores

    def refine(
        self, trajectories: Sequence[Trajectory], *, seed: int, greedy: bool, probe: bool = True
    ) -> RefineOutcome:
        """Algorithm 1 over a batch; trimmer cuts are drawn (seeded) unless `greedy`. Without
        `probe` the diagnostic probes are skipped (they cost as much generation as the
        revisions and are needed once per step, not per sampling round)."""
        started = time.perf_counter()
        final = list(trajectories)
        for traj in final:
            traj.refinement = Refinement(
                revised=False,
                cut_step=0,
                prefix_segments=len(traj.segments),
                original_answer=traj.answer,
                original_em=traj.metrics.get("em"),
            )
        outcome = RefineOutcome(final=final, originals=list(trajectories))
        open_rows = list(range(len(final)))
        first_readings: dict[int, Reading] = {}
        for round_index in range(self.config.max_revisions):
            reading_started = time.perf_counter()
            probing = probe and not round_index and self.probes_on
            readings = self.read_needed([final[i] for i in open_rows], probing)
            outcome.read_s += time.perf_counter() - reading_started
            cuts = []
            for i, reading in zip(open_rows, readings, strict=True):
                if reading is None:
                    continue
                k = self._cut(final[i], reading, seed, round_index, greedy)
                self._record(final[i], reading, k, first=round_index == 0)
                if round_index == 0:
                    first_readings[i] = reading
                    outcome.accepted += k == 0
                if k:
                    cuts.append((i, k))
            if not cuts:
                break
            regenerated = self.regenerate_cuts(
                [final[i] for i, _ in cuts],
                [k for _, k in cuts],
                regeneration_seed(seed, round_index),
            )
            for (i, k), new in zip(cuts, regenerated, strict=True):
                record = final[i].refinement
                assert record is not None
                kept = split_steps(final[i].segments)[k - 1].start  # segments `cut_before` keeps
                new.refinement = replace(
                    record, revised=True, cut_step=k, prefix_segments=kept,
                    revisions=record.revisions + 1,
                )  # fmt: skip
                final[i] = new
                if round_index == 0:
                    outcome.trims[i] = new
            open_rows = [i for i, _ in cuts]
        outcome.refine_s = time.perf_counter() - started
        outcome.probes_ran = probe
        if probe:
            run_probes(self, outcome, first_readings, seed, greedy)
        return outcome

    def score(self, traj: Trajectory, reading: Reading) -> float:
        """What the discriminator thresholds: the reading's log-odds (less its prior), or
        with `discriminator: confidence` the Actor's log surprisal ratio (−inf where the
        engine recorded no log-probabilities: such a trajectory is accepted)."""
        if self.config.discriminator == "confidence":
            return self._confidence(traj)
        return reading.score

    def revise(self, traj: Trajectory, reading: Reading) -> bool:
        """The discriminator (`config.discriminator`): the model's log-odds against τ, the
        rule baseline (no answer, or a search that returned nothing new), or the Actor's
        confidence against τ."""
        if reading.steps == 0:
            return False
        if self.config.discriminator == "rule":
            return rule_revise(traj)
        return self.score(traj, reading) > self.config.margin

    def trim(
        self, traj: Trajectory, reading: Reading, seed: int, round_index: int, greedy: bool
    ) -> int:
        """The trimmer (`config.trimmer`): π_h drawn with a seed per trajectory and round (its
        argmax when `greedy`; `checked`: the checked step where a check fired), a uniformly
        random step, seeded even when greedy, or step 1."""
        if self.config.trimmer == "first":
            return 1
        if self.config.trimmer == "random":
            rng = random.Random(row_seed(seed, f"random-trim:{traj.id}", round_index))
            return rng.randint(1, reading.steps)
        rng = None if greedy else random.Random(row_seed(seed, traj.id, round_index))
        return reading.cut(rng)

    def cut_distribution(self, reading: Reading) -> list[float]:
        """π_h(k), k = 1..T, of the configured trimmer (uniform for `random`, all on step 1
        for `first`)."""
        if self.config.trimmer == "first":
            return [1.0] + [0.0] * (reading.steps - 1)
        if self.config.trimmer == "random":
            return [1.0 / reading.steps] * reading.steps
        return reading.trimmer()

    def _cut(
        self, traj: Trajectory, reading: Reading, seed: int, round_index: int, greedy: bool
    ) -> int:
        """0 to accept, else the step to cut at."""
        if not self.revise(traj, reading):
            return 0
        return self.trim(traj, reading, seed, round_index, greedy)

    def _record(self, traj: Trajectory, reading: Reading, k: int, first: bool) -> None:
        ids = reading.candidates[k]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]
        decision = MetaDecision(
            prompt=reading.prompt,
            prompt_ids=reading.prompt_ids,
            decision=Segment(role="meta", text=text, token_ids=list(ids)),
            cut_step=k,
            steps=reading.steps,
            log_odds=reading.log_odds,
            answer_logprobs=list(reading.logprobs),
            prior=reading.prior,
        )
        assert traj.refinement is not None
        traj.refinement.decisions.append(decision)
        if first:
            traj.refinement.log_odds = self.score(traj, reading)

    def regenerate_cuts(
        self, trajectories: Sequence[Trajectory], cuts: Sequence[int], seed: int
    ) -> list[Trajectory]:
        """Each trajectory cut before its step k and continued by the Actor; with
        `fresh_tries` a continuation whose step k repeats the original's action is drawn
        again (another seed per try, one batched rollout per try) and the last draw kept."""
        starts = [cut_before(t, k) for t, k in zip(trajectories, cuts, strict=True)]
        out = self.regenerate(starts, seed)
        if not self.config.fresh_tries:  # the paper's single draw: no parsing on the hot path
            return out
        cut_actions = [step_action(t, k) for t, k in zip(trajectories, cuts, strict=True)]
        for attempt in range(1, self.config.fresh_tries + 1):
            again = [
                j for j, (new, k) in enumerate(zip(out, cuts, strict=True))
                if step_action(new, k) == cut_actions[j]
            ]  # fmt: skip
            if not again:
                break
            redone = self.regenerate([starts[j] for j in again], row_seed(seed, "fresh", attempt))
            for j, new in zip(again, redone, strict=True):
                out[j] = new
        return out

    def regenerate(self, starts: list[Trajectory], seed: int) -> list[Trajectory]:
        """Continue each start with the Actor (one batched rollout, kept ids)."""
        if not starts:
            return []
        questions = [
            Question(uid=t.uid or t.id, question=t.question, golden_answers=tuple(t.golden_answers))
            for t in starts
        ]
        config = self.rollout_config
        if self.config.regen_temperature:
            config = replace(config, temperature=self.config.regen_temperature)
        if self.backend is None:
            raise ValueError("this Meta-Refiner has no generation backend to regenerate with")
        if config.temperature <= 0:
            raise ValueError("regeneration needs rollout.temperature > 0 (greedy repeats the cut)")
        return run_rollouts(
            self.backend, self.tokenizer, self.retriever, questions, config,
            prefixes=starts, seed=seed,
        )  # fmt: skip
