"""Configuration of the supervised warm start (`searchrl sft`): the Actor's references and the
Search-R2 Meta-Refiner's meta phase. Presets in `src/searchrl/presets/*.yaml` override these
defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from searchrl.config.checks import (
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
)
from searchrl.config.errors import ConfigError, MissingInput
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.train import DataConfig, PolicyConfig


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm start on reference (or rejection-sampled) trajectories."""

    seed: Seed = 0
    """Shuffling seed."""
    source: Literal["references", "rejection", "direct", "rag"] = "references"
    """`references`: the world's reference trajectories; `rejection`: sample with search via
    the rollout engine and keep the correct ones (the paper's rejection-sampling baseline);
    `direct` / `rag`: the same references as (question → answer) / (question + top-k passages
    → answer) in the Direct / RAG prompts, for the fine-tuned baselines `direct-ft` /
    `rag-ft` of `searchrl eval`."""
    max_examples: NonNegativeInt = 300
    """Trajectories used (the first N after shuffling); 0 skips the Actor's phase, for a
    Meta-Refiner warm start on top of an Actor already fine-tuned (`policy.init_checkpoint`)."""
    answer_weight: PositiveFloat = 1.0
    """Loss weight of each answer token (`<answer> … </answer>` and EOS, the last reply of a
    transcript) against 1 for every other trained token. In a grounded reference the answer
    is 3-5 of ~85 trained tokens (~5 % of the loss at 1): the thoughts and queries, copied
    from the question and the passage, dominate what the model learns."""
    epochs: PositiveFloat = 0.65
    """Passes over the examples (fractional: stop part-way through the last one)."""
    batch_size: PositiveInt = 8
    """Sequences per optimizer step."""
    micro_batch_size: PositiveInt = 4
    """Sequences per forward/backward (packed into one row)."""
    micro_batch_tokens: NonNegativeInt = 0
    """> 0: a forward also holds at most this many tokens (see TrainConfig)."""
    lr: PositiveFloat = 1e-4
    """Peak learning rate."""
    warmup_ratio: Fraction = 0.05
    """Linear warm-up fraction, then linear decay to 0."""
    grad_clip: float = 1.0
    """Max global grad norm."""
    mask_env: bool = True
    """Mask env tokens (retrieved passages) out of the loss, as in RL."""
    save_every: NonNegativeInt = 10
    """Write a checkpoint every N optimizer steps of a phase and at its end, so `searchrl sft
    --resume` continues a killed run; 0 = none. A checkpoint holds the trained weights and
    the optimizer (about 3x the trained weights in fp32), only the newest is kept, and all
    are deleted when the run has exported its model."""
    rejection_samples: PositiveInt = 5
    """Rejection sampling: trajectories sampled per question (the paper: five)."""
    meta_examples: NonNegativeInt = 0
    """Search-R2 warm start: this many world-labelled Meta-Refiner examples (meta prompt →
    the earliest flawed step): solved train references, clean or corrupted at a step drawn
    uniformly from 1..T (`data.world.corrupt`); 0 = none."""
    meta_clean_share: Fraction = 0.5
    """Share of those examples that are clean references (label 0); the rest are references
    corrupted at a known step."""
    meta_schedule: Literal["mixed", "phase"] = "phase"
    """`mixed`: the meta examples join the Actor's references in one run (weighted by
    `meta_weight`); `phase`: the Actor's references first, then a meta phase on the meta
    examples (and the labelled own rollouts) alone."""
    meta_weight: Literal["token", "sequence"] = "sequence"
    """Mixed runs: `token`, a meta example's 2 answer tokens weigh like any token (~1% of the
    gradient next to references of 100–150 trained tokens); `sequence`, the example weighs
    as much as an average reference (its tokens multiplied by the ratio of trained tokens)."""
    meta_rollouts: NonNegativeInt = 0
    """Trajectories the Actor rolls out on train questions after its references (rollout
    temperature), labelled by the world's oracle (earliest step whose search missed its hop,
    or the answer step), balanced clean/flawed, trained on in the meta phase."""
    meta_rollouts_from: str = ""
    """A folder of an earlier `searchrl sft` run with own rollouts (its
    `trajectories/meta_{train,held_out}.jsonl`, oracle labels in `metrics.flaw_step`), or
    several separated by commas, pooled: the meta phase and the report use all of those
    instead of rolling out anew (`meta_rollouts` and `meta_eval_size` are then unused).
    Rollouts are the warm start's costly part; reusing them compares meta phases on the very
    same held-out transcripts, and pooling two runs' draws doubles the flawed examples a
    strong Actor yields. The world must be the one they were rolled out on."""
    meta_epochs: PositiveFloat = 1.0
    """Passes over the meta phase's examples."""
    meta_lr: PositiveFloat = 5e-5
    """Peak learning rate of the meta phase."""
    meta_replay: NonNegativeFloat = 0.5
    """Actor references (its SFT examples, else the world's solved train references) replayed
    per meta example in the meta phase, each meta example weighted like a reference. Without
    them the Actor answered "0" to every search prompt (docs/search_r2.md)."""
    meta_replay_from: Literal["references", "rollouts"] = "references"
    """What the meta phase replays. `references`: the Actor's SFT examples (or the world's
    solved references), which go on teaching the Actor, so it moves after its rollouts were
    labelled (one Actor's EM doubled) and the refiner then reads an Actor it never saw.
    `rollouts`: the Actor's own train rollouts, all of them as sampled; trained on, samples
    of the Actor minimise KL(Actor ‖ model), so they hold the Actor where its labelled
    rollouts were drawn and teach it nothing new (with `meta_rollouts_from`, those saved
    rollouts). In expectation only: on the tour's second round (213 of 642 own rollouts, a
    third flawed, two passes at lr 2e-4) it taught the Actor its own mistakes, EM 0.68 →
    0.56, where references on the same rollouts lifted it to 0.79 and the refiner read both
    alike (docs/notes/search_r2_log.md). Kept for larger Actors and gentler phases."""
    meta_train_layers: NonNegativeInt = 0
    """0 trains every weight in the meta phase; N > 0 only the top N decoder layers and the
    final norm (as `policy.train_layers`, for this phase alone): a cheaper backward pass."""
    meta_eval_size: NonNegativeInt = 40
    """With meta examples or rollouts: held-out questions (`data.eval_split`) the Actor rolls
    out once each, labelled by the oracle and never trained on, and as many held-out
    corrupted references; the final refiner's ROC-AUC, accuracy and trimmer exact step on
    them go to `summary.json` (`meta/*`, `meta/synthetic/*`)."""
    meta_final_rollouts: bool = True
    """Also roll out the same held-out questions with the final model and report how the
    refiner reads those (`meta/final/*`): the meta phase's replay trains the Actor further
    (it doubled one Actor's EM), so these, not the earlier Actor's, are what RL reads."""
    model: ModelConfig = field(default_factory=ModelConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def validate(self) -> None:
        """Something must be trained; reused own rollouts must be there."""
        meta = self.meta_examples or self.meta_rollouts or self.meta_rollouts_from
        if self.max_examples == 0 and not meta:
            raise ConfigError(
                "max_examples: 0 trains no Actor examples; give meta_examples or meta_rollouts"
            )
        for folder in self.rollout_folders():
            for name in ("meta_train.jsonl", "meta_held_out.jsonl"):
                if not (folder / "trajectories" / name).is_file():
                    raise MissingInput(
                        f"meta_rollouts_from: {folder / 'trajectories' / name} does not exist"
                    )
        if self.meta_replay_from == "rollouts" and not (
            self.meta_rollouts or self.meta_rollouts_from
        ):
            raise ConfigError(
                "meta_replay_from: rollouts replays the Actor's own rollouts; "
                "give meta_rollouts or meta_rollouts_from"
            )
        if self.meta_train_layers and self.policy.lora_rank:
            raise ConfigError("meta_train_layers: freezes full weights; not with policy.lora_rank")

    def rollout_folders(self) -> list[Path]:
        """The folders `meta_rollouts_from` names, in order (none when it is empty)."""
        return [Path(part.strip()) for part in self.meta_rollouts_from.split(",") if part.strip()]
