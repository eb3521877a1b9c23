"""The Search-R2 Meta-Refiner: the policy reads its own trajectory under a meta prompt, a
discriminator decides whether to revise, a trimmer picks the earliest flawed step, and the
trajectory is cut there and regenerated (seed 001, Algorithm 1)."""

from searchrl.refiner.diagnostics import refiner_metrics
from searchrl.refiner.joint import meta_rows
from searchrl.refiner.meta import Reading
from searchrl.refiner.outcome import RefineOutcome
from searchrl.refiner.refiner import MetaRefiner
from searchrl.refiner.rule import rule_revise
from searchrl.refiner.steps import cut_before, meta_prompt, regeneration_seed, split_steps

__all__ = [
    "MetaRefiner",
    "Reading",
    "RefineOutcome",
    "cut_before",
    "meta_prompt",
    "meta_rows",
    "refiner_metrics",
    "regeneration_seed",
    "rule_revise",
    "split_steps",
]
