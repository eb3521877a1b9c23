"""How a multi-turn search rollout runs (Search-R1 Algorithm 1; seed 000 "The Rollout
Protocol"). Defaults are the paper's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from searchrl.config.checks import NonNegativeFloat, NonNegativeInt, PositiveInt, Range
from searchrl.config.errors import ConfigError

TopP = Annotated[float, Range(gt=0, le=1)]
PROMPT_TEMPLATES = ("search-r1",)
"""Named prompt templates (`data.templates` holds their text)."""


@dataclass(frozen=True)
class RolloutConfig:
    """Budgets, sampling and prompt settings of the rollout engine."""

    max_turns: NonNegativeInt = 4
    """B: generation rounds in which a search may be executed. One more, final round follows
    in which a search is not executed, so a trajectory makes at most B searches."""

    topk: PositiveInt = 3
    """Passages retrieved per search query."""

    max_response_tokens: PositiveInt = 500
    """Most tokens the policy may generate in one turn."""

    max_obs_tokens: PositiveInt = 500
    """Token budget of one `<information>` block; the passages are cut to fit, the closing
    `</information>` is always kept (the original lost it when truncating)."""

    max_total_tokens: PositiveInt = 4096
    """Cap on prompt + response tokens. The prompt is never cut: the response stops growing
    when the cap is reached and the trajectory ends marked truncated."""

    temperature: NonNegativeFloat = 1.0
    """Sampling temperature; 0 means greedy decoding."""

    top_p: TopP = 1.0
    """Nucleus sampling mass; 1.0 disables it."""

    stop: tuple[str, ...] = ("</search>", "</answer>")
    """Strings that end a generation turn immediately (EOS always does too). The original
    had none and let every turn run to the token limit."""

    force_answer: bool = False
    """In the final round (after `max_turns` rounds that could search), the reasoning is closed
    for the policy: generation stops at `</think>`, and whatever the round ends with short of
    an answer (a closed thought, a search that will not run, its token cap in mid-thought,
    which the engine closes with `</think>`), the engine appends `\n<answer>` (an env
    segment) and the policy completes the answer within `answer_tokens`. A row out of room
    earlier is forced the same way. Off (the paper): a final round that searches again ends
    the trajectory without an answer. Search-R1's users ask for this; it gives every
    trajectory an answer to be scored."""

    answer_tokens: PositiveInt = 32
    """With `force_answer`: most tokens the policy writes after the engine opened its answer;
    an answer not closed by then is cut there (its first line, `stop_reason` `answer_cap`),
    so the final round always ends in an answer. Every earlier generation leaves this room
    (and the few tokens that open the answer) under `max_total_tokens`."""

    decode_chunk: NonNegativeInt = 0
    """> 0: one generation call gives a row at most this many tokens; a longer turn goes on
    in the next call (stop strings straddling two calls are found), beside the rows that
    joined meanwhile, so one long turn does not keep a call decoding it alone after the
    others stopped. 0: a turn is one call. `searchrl eval` uses 64 (questions stream through
    it); training keeps 0."""

    streaming: bool = True
    """Continuous batching across turns where the engine offers it (vLLM): each trajectory's
    next turn starts as soon as its own last turn and search are done, instead of every turn
    waiting for the slowest trajectory of the batch; the queries of trajectories that finish
    in the same engine step go to the retriever in one call. Off: every turn of the batch is
    one engine call and one retriever call (the paper's loop). The HF engine always runs
    turn by turn."""

    search: bool = True
    """Give the policy the search engine. False is the R1 baseline (RL without search): the
    prompt carries no search instructions (`r1_prompt`), `</search>` does not stop a turn, no
    query is ever executed and a trajectory ends after its one turn, answered or not."""

    use_chat_template: bool = True
    """Wrap the Search-R1 prompt in the tokenizer's chat template (instruct models); a
    tokenizer without a template gets the plain text either way."""

    prompt_template: str = "search-r1"
    """The instruction the policy sees with search on: `search-r1` (the paper's Table 1, the
    bytes the released checkpoints were trained on) or your own text with a `{question}`
    placeholder (the question stripped, with a "?" appended when it lacks one)."""

    file_prompt: bool = True
    """A question whose file carries its own prompt (Search-R1 parquet's `prompt` column)
    gets that prompt as written, as veRL feeds it; off: every question gets
    `prompt_template`. With search off (R1) the R1 prompt is always used."""

    def validate(self) -> None:
        """A custom template must say where the question goes."""
        if self.prompt_template not in PROMPT_TEMPLATES and "{question}" not in (
            self.prompt_template
        ):
            raise ConfigError(
                f"prompt_template: {self.prompt_template[:40]!r} is neither a known template "
                f"({', '.join(PROMPT_TEMPLATES)}) nor a text with a {{question}} placeholder"
            )
