"""Steps of a trajectory, the meta prompt that numbers them, and the cut that keeps a prefix.

A step is one policy turn plus the env output that follows it (retrieved passages, the
invalid-action feedback). The meta prompt is the paper's (seed 001, Appendix L, Table 12): the
instruction, the question, then `ASSISTANT_STEP_i` / `TOOL_OUTPUT_i` entries; the model answers
with a single integer. The prompt is rendered as text and tokenized as a new prompt (it is not
a continuation of the trajectory); the cut, in contrast, copies the kept segments token for
token.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from searchrl.data.templates import render_chat
from searchrl.rollout.parse import parse_action
from searchrl.rollout.sampler import continue_from, row_seed
from searchrl.types import Segment, Trajectory

META_INSTRUCTION = (
    "You are a meticulous meta-thinker. Review the numbered ASSISTANT_STEP entries and identify "
    "the earliest flawed step. Return a single integer between 0 and {max_steps} where 0 means "
    "all steps are acceptable."
)
CONTENT_FREE = "N/A"


@dataclass(frozen=True)
class Step:
    """One policy turn (`policy`) and the env segments after it; `start` indexes the
    trajectory's segment list."""

    start: int
    policy: Segment
    env: tuple[Segment, ...]


def split_steps(segments: list[Segment]) -> list[Step]:
    """Group segments into steps. Env segments before the first policy turn (none in a rollout)
    and `meta` segments belong to no step."""
    steps: list[Step] = []
    for index, segment in enumerate(segments):
        if segment.role == "policy":
            steps.append(Step(start=index, policy=segment, env=()))
        elif segment.role == "env" and steps:
            last = steps[-1]
            steps[-1] = Step(last.start, last.policy, (*last.env, segment))
    return steps


def meta_text(question: str, steps: list[Step]) -> str:
    """The meta prompt's user message for a trajectory with these steps."""
    entries = [(s.policy.text.strip(), "".join(e.text for e in s.env).strip()) for s in steps]
    return _render_meta(question, entries)


def content_free_text(n_steps: int) -> str:
    """The meta prompt of a transcript with `n_steps` steps and no content (every text "N/A"):
    what the refiner answers to it is its prior for that length (`Reading.prior`)."""
    return _render_meta(CONTENT_FREE, [(CONTENT_FREE, CONTENT_FREE)] * n_steps)


def _render_meta(question: str, entries: list[tuple[str, str]]) -> str:
    lines = [META_INSTRUCTION.format(max_steps=len(entries)), "", f"USER: {question.strip()}", ""]
    for i, (policy, tool) in enumerate(entries, start=1):
        lines += [f"ASSISTANT_STEP_{i}:", policy]
        lines += [f"TOOL_OUTPUT_{i}:", tool or "(none)", ""]
    lines.append("Earliest flawed step (0 if none):")
    return "\n".join(lines)


def meta_prompt(tokenizer: object, question: str, steps: list[Step]) -> tuple[str, list[int]]:
    """The rendered meta prompt (chat template when the tokenizer has one) and its ids."""
    return render_meta(tokenizer, meta_text(question, steps))


def render_meta(tokenizer: object, user: str) -> tuple[str, list[int]]:
    """A meta prompt's user message → the rendered prompt and its ids."""
    text = render_chat(tokenizer, user)  # type: ignore[arg-type]
    chat = bool(getattr(tokenizer, "chat_template", None))
    ids = list(tokenizer.encode(text, add_special_tokens=not chat))  # type: ignore[attr-defined]
    return text, ids


def step_action(traj: Trajectory, step: int) -> str:
    """Step `step`'s (1-based) action as "kind: content", content lower-cased with its spaces
    collapsed, so the same query or answer reads the same; "" past the last step."""
    steps = split_steps(traj.segments)
    if step > len(steps):
        return ""
    action = parse_action(steps[step - 1].policy.text)
    return f"{action.kind}: {' '.join(action.content.lower().split())}"


def cut_before(traj: Trajectory, step: int) -> Trajectory:
    """A start for regeneration from `step` (1-based): the prompt and every segment of steps
    before it, token for token with their roles; searches made in those steps kept; outcome
    cleared (`continue_from`). Action counters are recounted over the kept turns (the
    count of truncated observations stays the original's, an upper bound)."""
    steps = split_steps(traj.segments)
    if not 1 <= step <= len(steps):
        raise ValueError(f"cut step {step} outside 1..{len(steps)}")
    keep = steps[step - 1].start
    head = copy.copy(traj)
    head.segments = traj.segments[:keep]
    head.searches = [c for c in traj.searches if c.turn < step]
    start = continue_from(head)
    kinds = [parse_action(s.policy.text).kind for s in steps[: step - 1]]
    start.stats.valid_actions = sum(k != "invalid" for k in kinds)
    start.stats.invalid_actions = sum(k == "invalid" for k in kinds)
    start.refinement = None
    return start


def regeneration_seed(seed: int, round_index: int) -> int:
    """The rollout seed of revision round `round_index` (never the first pass's own)."""
    return row_seed(seed, "meta-refiner", round_index + 1)
