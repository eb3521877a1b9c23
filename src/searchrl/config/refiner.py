"""The Search-R2 Meta-Refiner (seed 001 "The Meta-Refiner", Algorithm 1): whether trajectories
are read back by the policy under the meta prompt, when they are revised, how often, and
whether the refiner's decisions are trained on. Defaults are the paper's (τ = 0, N_max = 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from searchrl.config.checks import (
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    Range,
)
from searchrl.config.errors import ConfigError

Revisions = Annotated[int, Range(ge=1, le=16)]
Share = Annotated[float, Range(gt=0, le=1)]
Margin = Annotated[float, Range(ge=-100, le=100)]


@dataclass(frozen=True)
class RefinerConfig:
    """Switches and budgets of the Meta-Refiner (discriminator, trimmer, cut and regenerate)."""

    enabled: bool = False
    """Read every finished rollout with the meta prompt and cut-and-regenerate the ones the
    discriminator rejects; GRPO groups are then the refined trajectories."""

    margin: Margin = 0.0
    """τ: revise iff log P(revise) − log P(no revision) > τ (paper: 0.0). Negative values
    revise more, positive ones less."""

    max_revisions: Revisions = 1
    """N_max: cut-and-regenerate rounds per trajectory (paper: 1; its ablation goes to 4)."""

    joint: bool = False
    """Joint optimization: each meta prompt + decision joins the batch as an extra row whose
    decision tokens carry the final trajectory's advantage. Off: the policy trains on the
    reasoning traces only (the paper's "Search-R1 + Meta-Refiner" ablation row)."""

    joint_share: Share = 1.0
    """Share of the meta rows trained each step under `joint` (paper: 1, all). A meta row costs
    the update what its trajectory costs (its prompt holds the whole transcript) for two
    trained tokens; below 1 a seeded share k = round(share · m) of the m rows is trained, each
    weighing m/k, and the untrained ones still count in their trajectory's normalisation, so
    the expected update is the full one (with more variance in the refiner's part)."""

    discriminator: Literal["model", "rule", "confidence"] = "model"
    """Who decides to revise: `model` (the log-odds against τ, the paper); `rule`, a
    baseline the paper never ran: revise iff the trajectory has no answer or one of its
    searches returned nothing new (no passage, or only passages an earlier search returned);
    or `confidence`, the Actor's own surprisal while it wrote the trajectory (mean −log π of
    its tokens, as sampled; `refiner.confidence`): revise iff ln(surprisal /
    `confidence_threshold`) > τ. On the tour's warm start it ranked the Actor's flawed
    rollouts above its clean ones at ROC-AUC 0.89 where the meta prompt read 0.63
    (docs/search_r2.md). The trimmer still reads the meta prompt. None reads a gold answer,
    so all are fair at evaluation too."""

    confidence_threshold: PositiveFloat = 0.05
    """`discriminator: confidence`: the surprisal (nats a token) above which a trajectory is
    revised at τ = 0. The Actor's own: a warm start reports the one that revises as many of
    its held-out rollouts as are flawed (`meta/final/confidence/threshold_for_flawed_share`;
    0.02 for the tour's, where 0.05 revised 23 % of them)."""

    calibration: Literal["none", "content_free"] = "none"
    """What τ is compared with: `none`, the raw log-odds (the paper); `content_free`, the
    log-odds less those of a content-free meta prompt with the same step count T (every text
    "N/A"). Raw log-odds sum T candidates, so a discriminator that knows nothing has
    log-odds ≈ log T and revises more the longer the trajectory; the content-free prompt
    measures that prior and removes it. `none` is the default since every warm start with
    own rollouts ranked held-out transcripts better raw (ROC-AUC 0.82 vs 0.77, 0.78 vs 0.76)
    and the prior swung its revision rate at τ = 0 to 0.10 in one run and 1.0 in another
    where the raw rate was 0.51 and 0.55 (docs/search_r2.md); `content_free` is for a
    refiner without a meta warm start."""

    trimmer: Literal["model", "random", "first", "checked"] = "model"
    """Where to cut: `model` (π_h over the valid steps, the paper), `random`, a uniformly
    random step 1..T (seeded; the random-cut baseline), `first`, always step 1: reject and
    resample the whole trajectory, a baseline the paper does not run, or `checked` (not in the
    paper): the earliest step a check of the transcript shows wrong (an invalid action, a
    repeated query, a search that brings no new passage or goes beyond the Actor's own plan,
    an answer found in no passage: `refiner.rule.checked_step`), else π_h. On the held-out
    rollouts of the tour's three Actors it named the oracle's flawed step 0.73, 0.67 and 0.52
    of the time against π_h's 0.54, 0.58 and 0.45 (docs/search_r2.md). `first` tells the
    discriminator's share of the refiner's gain from the trimmer's: on the tour's world even
    the oracle's flaw step earned only ~5 points of EM over the trimmer's average cut, and on
    the Actors of a second and third meta round a new rollout answered 0.11–0.17 more flawed
    trajectories than the trimmer's cut, 0.06–0.09 more than the oracle's
    (`benchmarks/search_r2/trim_skill.py`, docs/search_r2.md)."""

    trim_surprisal: NonNegativeFloat = 0.0
    """β: with `trimmer: model`, π_h(k) ∝ P(k) · s_k^β, s_k the largest token surprisal of
    the Actor's step k as sampled (`refiner.confidence.step_surprisal`); 0 is the paper's
    π_h. Not robust: on the tour's warm start, where it was chosen, β = 1 named the oracle's
    flawed step 0.64 of the time on the four-draw gate against π_h's 0.54, but on the two
    second-round Actors after it 0.54 against 0.58 and 0.39 against 0.45
    (docs/notes/search_r2_log.md)."""

    fresh_tries: NonNegativeInt = 0
    """Redraws of a regeneration that repeats the cut step's action (the same query, which
    BM25 answers with the same passages, or the same answer): such a continuation is drawn
    again with another seed, up to this many times, and the last draw is kept. The refiner
    judged step k flawed, so taking step k's action again repeats the flaw; on the third
    meta round's Actor 35–43 % of the regenerations from the oracle's flaw step did, and
    earned 0.00–0.14 EM against 0.51–0.60 for the others; two redraws halved the repeats and
    lifted every cut by 0.04–0.05 EM, though a new rollout stayed ahead (docs/search_r2.md).
    The baseline cuts of S_trim are regenerated the same way. 0: the paper's single draw."""

    regen_temperature: NonNegativeFloat = 0.0
    """Temperature of the cut trajectory's continuation (trims and S_trim's baseline cuts
    alike); 0 samples it at the rollout's temperature (the paper). A continuation from the
    kept prefix repeats the flawed step 24–51 % of the time (`benchmarks/search_r2/trim_skill.py`);
    a hotter one repeats it less but writes worse otherwise: on the tour's warm start no
    temperature from 0.7 to 1.3 made a cut beat a new rollout at 1.0
    (docs/notes/search_r2_log.md)."""

    read_on_engine: bool = True
    """Read (score the candidate answers) on the generation engine where it can (vLLM, whose
    weights are the policy's, synced before every rollout) rather than with the trainer's
    module: the engine batches the meta prompts and serves a candidate's end-of-turn from the
    prompt's cached KV blocks. Prompts longer than the engine's context, and engines that
    cannot score (HF), are read by the module. On 2 cores (vLLM, 32-token
    blocks) a step's reading took 3.7–3.9 s against 7.8–8.9 s by the module in bf16, and the
    log-odds moved 0.07–0.08 nats on average (docs/search_r2.md)."""

    micro_batch_size: NonNegativeInt = 0
    """Meta prompts per forward pass when scoring the candidate answers (grouped by length);
    0 picks by device: 1 on a CPU, where a padded batch's masked attention costs more than
    batching saves (16 prompts: 24.5 s one per pass, 28.6 s two), 4 on an accelerator."""

    probe_share: Fraction = 0.25
    """Share of accepted trajectories also trimmed and regenerated (not trained on) to
    estimate J_trim for the selection precision A_prec; 0 turns the probe off."""

    random_cut_probe: bool = True
    """Also regenerate every trimmed trajectory from a baseline cut (not trained on), for the
    trimming skill S_trim = R(chosen cut) − R(baseline cut). The baseline cut is drawn from
    the trimmer's batch-average cut distribution (the paper's Σ_k E[π_h(k)]·E[G_k]), so a
    trimmer that always cuts late is not credited with skill. Skipped under `trimmer: first`,
    whose baseline cut is its own (step 1): S_trim is 0 there by construction."""

    def validate(self) -> None:
        """Joint optimization trains the refiner's decisions, so it needs the refiner on."""
        if self.joint and not self.enabled:
            raise ConfigError("joint: needs refiner.enabled=true")
        if self.joint_share < 1 and not self.joint:
            raise ConfigError("joint_share: a share of the meta rows needs refiner.joint=true")
