"""Trajectories whose earliest flawed step is known (world references, clean = 0, corrupted at
step k = k): supervised Meta-Refiner examples for the warm start, and the refiner's accuracy.

A 135M model does not follow the meta prompt zero-shot, as it did not follow the search prompt;
the warm start teaches the answer format and a first notion of a flaw, RL refines it.
"""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.refiner.meta import Reading
from searchrl.refiner.scoring import candidate_ids
from searchrl.refiner.steps import meta_prompt, split_steps
from searchrl.types import Trajectory


def meta_example(tokenizer: object, traj: Trajectory, label: int) -> Trajectory:
    """The meta prompt of `traj` with the answer `label` as its one `meta` segment (the exact
    candidate tokens the refiner scores, EOS included)."""
    steps = split_steps(traj.segments)
    if not 0 <= label <= len(steps):
        raise ValueError(f"label {label} outside 0..{len(steps)}")
    text, ids = meta_prompt(tokenizer, traj.question, steps)
    answer = candidate_ids(tokenizer, len(steps))[label]
    example = Trajectory(
        id=f"{traj.id}/meta",
        question=traj.question,
        golden_answers=list(traj.golden_answers),
        prompt=text,
        prompt_ids=ids,
        uid=traj.uid,
    )
    decoded = tokenizer.decode(answer, skip_special_tokens=False)  # type: ignore[attr-defined]
    example.append("meta", decoded, answer)
    return example


def label_accuracy(
    readings: Sequence[Reading | None], labels: Sequence[int], margin: float
) -> dict[str, float]:
    """Discriminator accuracy (revise iff label > 0) at threshold `margin`, its recall on the
    flawed and specificity on the clean ones, and the trimmer's exact-step accuracy (argmax
    cut == label) on the flawed ones."""
    right = flawed_hit = clean_hit = exact = flawed = clean = 0
    for reading, label in zip(readings, labels, strict=True):
        if reading is None:
            continue
        revise = reading.revise(margin)
        right += revise == (label > 0)
        if label > 0:
            flawed += 1
            flawed_hit += revise
            exact += reading.cut(None) == label
        else:
            clean += 1
            clean_hit += not revise
    total = flawed + clean
    return {
        "meta/discriminator_accuracy": right / max(total, 1),
        "meta/discriminator_recall": flawed_hit / max(flawed, 1),
        "meta/discriminator_specificity": clean_hit / max(clean, 1),
        "meta/trimmer_exact_step": exact / max(flawed, 1),
        "meta/labelled": float(total),
    }
