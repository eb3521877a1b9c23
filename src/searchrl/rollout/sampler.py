"""Questions × samples → the trajectories a rollout starts from, and the per-row seeds.

Seeds are derived from (run seed, trajectory id, turn) with a stable hash, so a row's sampled
tokens do not depend on batch composition or order, and a rollout resumed from a prefix of a
trajectory reproduces that trajectory's continuation.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence

from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import r1_prompt, render_chat, search_prompt
from searchrl.types import Question, Trajectory, TrajectoryStats


def trajectory_id(uid: str, sample: int) -> str:
    """`uid#sample`: unique within a rollout, stable across runs."""
    return f"{uid}#{sample}"


def row_seed(seed: int, traj_id: str, turn: int) -> int:
    """A 63-bit seed for one generation turn of one trajectory."""
    digest = hashlib.blake2b(f"{seed}\x00{traj_id}\x00{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def user_text(
    question: Question, search: bool = True, template: str = "search-r1", file_prompt: bool = True
) -> str:
    """What the policy is asked, before any chat template: the question's own prompt from its
    file (when it has one and `file_prompt`), else `template` filled with the question; the R1
    prompt, without search, when `search` is off."""
    if not search:
        return r1_prompt(question.question)
    if file_prompt and question.prompt:
        return question.prompt
    return search_prompt(question.question, template)


def render_prompt(
    tokenizer: object,
    question: str,
    use_chat_template: bool,
    search: bool = True,
    template: str = "search-r1",
) -> str:
    """The search prompt (`template`; the R1 prompt, without search, when `search` is off),
    inside the chat template when asked and available."""
    text = search_prompt(question, template) if search else r1_prompt(question)
    return render_chat(tokenizer, text) if use_chat_template else text  # type: ignore[arg-type]


def encode_prompt(tokenizer: object, prompt: str, use_chat_template: bool) -> list[int]:
    """Token ids of the rendered prompt; a chat template already contains any BOS it needs,
    so special tokens are only added for plain prompts."""
    chat = use_chat_template and bool(getattr(tokenizer, "chat_template", None))
    return list(tokenizer.encode(prompt, add_special_tokens=not chat))  # type: ignore[attr-defined]


def fresh_trajectories(
    tokenizer: object,
    questions: Sequence[Question],
    n_samples: int,
    config: RolloutConfig,
) -> list[Trajectory]:
    """`n_samples` empty trajectories per question, grouped by question (GRPO groups), each
    prompted as `config` says (`user_text`, then the chat template when asked)."""
    chat = config.use_chat_template
    starts = []
    for question in questions:
        text = user_text(question, config.search, config.prompt_template, config.file_prompt)
        prompt = render_chat(tokenizer, text) if chat else text  # type: ignore[arg-type]
        prompt_ids = encode_prompt(tokenizer, prompt, chat)
        for sample in range(n_samples):
            starts.append(
                Trajectory(
                    id=trajectory_id(question.uid, sample),
                    question=question.question,
                    golden_answers=list(question.golden_answers),
                    prompt=prompt,
                    prompt_ids=list(prompt_ids),
                    uid=question.uid,
                    sample=sample,
                )
            )
    return starts


def continue_from(prefix: Trajectory) -> Trajectory:
    """A copy of `prefix` ready to be extended: same id, prompt, segments and searches. The
    outcome (answer, metrics, reward, stop reason, truncation, failure, timings) is cleared;
    the turn counter is the number of policy turns already in it."""
    start = copy.deepcopy(prefix)
    start.answer = None
    start.metrics = {}
    start.reward = {}
    kept = start.stats
    start.stats = TrajectoryStats(
        turns=sum(s.role == "policy" for s in start.segments),
        searches=len(start.searches),
        valid_actions=kept.valid_actions,
        invalid_actions=kept.invalid_actions,
        policy_tokens=sum(len(s.token_ids) for s in start.segments if s.role == "policy"),
        env_tokens=sum(len(s.token_ids) for s in start.segments if s.role == "env"),
        info_truncated=kept.info_truncated,
    )
    return start
