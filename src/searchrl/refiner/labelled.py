"""Trajectories whose earliest flawed step is known: supervised Meta-Refiner examples for the
warm start, and the refiner's accuracy against the labels.

Labels come from the synthetic world, two ways: references corrupted at a known step
(`data.world.corrupt`, clean = 0), and the model's own rollouts read by the world's oracle
(`oracle_flaw`: the earliest step whose search missed the passages of the hop it needed, or
the answer step when only the answer is wrong). A 135M model does not follow the meta prompt
zero-shot, as it did not follow the search prompt; the warm start teaches the answer format
and what a flaw looks like in the model's own transcripts, RL refines it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from scipy.stats import mannwhitneyu

from searchrl.refiner.confidence import surprisal, threshold_for_share
from searchrl.refiner.meta import Reading
from searchrl.refiner.rule import checked_step
from searchrl.refiner.scoring import candidate_ids
from searchrl.refiner.steps import meta_prompt, split_steps
from searchrl.rollout.parse import parse_action
from searchrl.types import Trajectory


def oracle_flaw(traj: Trajectory, support: Sequence[Sequence[str]]) -> int:
    """The earliest flawed step of a finished world trajectory (0: none), by the world's
    oracle. `support[h]` lists the passages stating hop h's fact (a world question's
    `metadata["support"]`). The searches are read as the chain's hops in order, so step i's
    search (all before it sound) is sound iff it brings a passage of hop i; an answer step is
    sound iff the answer is right. The first step that is not
    sound is the flaw: a search that missed its hop (wrong entity, wrong keyword, a repeat, a
    search after the last hop), an invalid action, a wrong answer after sound searches. A
    trajectory that never answers is flawed at its last step if nothing earlier was.

    Unlike the oracle judge's "useful" (a collection with a hop no earlier one covered), a
    search that finds its hop's passage again is sound here: the scripted solver's clean
    transcripts do that whenever an earlier search happened to bring the next hop along."""
    steps = split_steps(traj.segments)
    calls = {call.turn: call for call in traj.searches}
    for index, step in enumerate(steps, start=1):
        kind = parse_action(step.policy.text).kind
        if kind == "answer":
            return 0 if traj.metrics.get("em", 0.0) > 0 else index
        call = calls.get(index)
        if kind == "invalid" or call is None or index > len(support):
            return index
        if not set(support[index - 1]) & set(call.doc_ids):
            return index
    return len(steps)


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Area under the ROC curve of `scores` for the `positive` class (ties count half): the
    probability that a random flawed transcript scores above a random clean one. NaN when one
    class is missing."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return math.nan
    return float(mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))


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
    """How the refiner's readings agree with the labels (label > 0 = flawed):

    - `roc_auc`: ROC-AUC of the discriminator's score (log-odds less the content-free prior
      when calibrated), threshold-free; `roc_auc_raw` of the raw log-odds;
    - at τ = `margin`: accuracy, recall on the flawed, specificity on the clean, revision rate
      (`revision_rate_raw`: the rate on the raw log-odds, without the prior);
    - `tau_for_flawed_share`: the τ at which the refiner would revise as many transcripts as
      are flawed (a calibration for RL);
    - `trimmer_exact_step`: argmax cut of the paper's π_h == label on the flawed ones
      (`trimmer_exact_step_surprisal`: of π_h tilted by the steps' surprisal, where the
      readings carry the tilt, `refiner.trim_surprisal`), next to what always
      cutting at the first or at the last step would score, and `trimmer_best_constant`,
      the best any one fixed step k would score on these labels (an upper bound of every
      constant cut: own rollouts pile their flaws on one hop, so a trimmer that learnt only
      where flaws usually are can look skilled next to "first" and "last")."""
    pairs = [(r, y) for r, y in zip(readings, labels, strict=True) if r is not None]
    flawed = [(r, y) for r, y in pairs if y > 0]
    clean = [r for r, y in pairs if y == 0]
    revised = [r.revise(margin) for r, _ in pairs]
    scores = sorted(r.score for r, _ in pairs)
    n_clean = len(clean)
    threshold = scores[n_clean - 1] if 0 < n_clean <= len(scores) else math.nan
    positive = [y > 0 for _, y in pairs]

    def share(hits: int, total: int) -> float:
        return hits / total if total else math.nan

    return {
        "meta/labelled": float(len(pairs)),
        "meta/flawed_share": share(len(flawed), len(pairs)),
        "meta/roc_auc": roc_auc([r.score for r, _ in pairs], positive),
        "meta/roc_auc_raw": roc_auc([r.log_odds for r, _ in pairs], positive),
        "meta/discriminator_accuracy": share(
            sum(v == p for v, p in zip(revised, positive, strict=True)), len(pairs)
        ),
        "meta/discriminator_recall": share(sum(r.revise(margin) for r, _ in flawed), len(flawed)),
        "meta/discriminator_specificity": share(sum(not r.revise(margin) for r in clean), n_clean),
        "meta/revision_rate": share(sum(revised), len(pairs)),
        "meta/revision_rate_raw": share(sum(r.log_odds > margin for r, _ in pairs), len(pairs)),
        "meta/tau_for_flawed_share": threshold,
        "meta/score_mean": sum(r.score for r, _ in pairs) / len(pairs) if pairs else math.nan,
        "meta/trimmer_exact_step": share(
            sum(replace(r, tilt=(), checked=0).cut(None) == y for r, y in flawed), len(flawed)
        ),
        "meta/trimmer_exact_step_surprisal": share(
            sum(r.cut(None) == y for r, y in flawed if r.tilt), len(flawed)
        )
        if any(r.tilt for r, _ in flawed)
        else math.nan,
        "meta/trimmer_first_step": share(sum(y == 1 for _, y in flawed), len(flawed)),
        "meta/trimmer_last_step": share(sum(y == r.steps for r, y in flawed), len(flawed)),
        "meta/trimmer_best_constant": share(
            max((sum(y == k for _, y in flawed) for k in {y for _, y in flawed}), default=0),
            len(flawed),
        ),
    }


def checked_accuracy(
    trajectories: Sequence[Trajectory], readings: Sequence[Reading | None], labels: Sequence[int]
) -> dict[str, float]:
    """The checked trimmer (`refiner.trimmer: checked`) on labelled transcripts:
    `meta/trimmer_exact_step_checked`, how often the step `checked_step` flags (π_h's argmax
    where no check fires) is the labelled one, on the flawed; and how often a check fires on
    the flawed and on the clean (`meta/checked/fires_flawed`, `.../fires_clean`: a check
    that fires on a clean transcript would cut a sound step)."""
    triples = zip(trajectories, readings, labels, strict=True)
    rows = [(checked_step(t), r, y) for t, r, y in triples if r is not None]
    flawed = [(k, r, y) for k, r, y in rows if y > 0]
    clean = [k for k, _, y in rows if y == 0]
    if not flawed:
        return {}
    hits = sum((k or replace(r, tilt=(), checked=0).cut(None)) == y for k, r, y in flawed)
    return {
        "meta/trimmer_exact_step_checked": hits / len(flawed),
        "meta/checked/fires_flawed": sum(k > 0 for k, _, _ in flawed) / len(flawed),
        "meta/checked/fires_clean": sum(k > 0 for k in clean) / len(clean) if clean else math.nan,
    }


def confidence_accuracy(
    trajectories: Sequence[Trajectory], labels: Sequence[int]
) -> dict[str, float]:
    """How the Actor's own surprisal (`refiner.confidence`) reads labelled rollouts, with the
    same keys' prefix as `label_accuracy`: `meta/confidence/roc_auc` (flawed above clean),
    `meta/confidence/threshold_for_flawed_share` (the `refiner.confidence_threshold` that
    revises as many as are flawed: the calibration for RL) and the median surprisal of the
    clean and of the flawed ones. Rollouts without recorded log-probabilities are left out;
    none at all (references, say) gives no keys."""
    pairs = [(value, y) for t, y in zip(trajectories, labels, strict=True)
             if (value := surprisal(t)) is not None]  # fmt: skip
    if not pairs:
        return {}
    flawed = [v for v, y in pairs if y > 0]
    clean = [v for v, y in pairs if y == 0]
    return {
        "meta/confidence/roc_auc": roc_auc([v for v, _ in pairs], [y > 0 for _, y in pairs]),
        "meta/confidence/threshold_for_flawed_share": threshold_for_share(
            [v for v, _ in pairs], len(flawed) / len(pairs)
        ),
        "meta/confidence/median_clean": statistics.median(clean) if clean else math.nan,
        "meta/confidence/median_flawed": statistics.median(flawed) if flawed else math.nan,
    }
