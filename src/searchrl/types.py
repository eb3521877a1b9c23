"""The records every stage passes along: documents, questions and trajectories.

A trajectory is built from token ids, one segment at a time, with the role of each segment
fixed at the moment it is appended. The loss mask is derived from those roles, so it can never
drift from the tokens (Search-R1 rebuilt its mask by re-tokenizing text, the source of its
masking bugs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["policy", "env", "meta"]
ROLES: tuple[Role, ...] = ("policy", "env", "meta")


@dataclass(frozen=True)
class Document:
    """One corpus passage. `contents` follows the wiki-18 convention: `"Title"\\ntext`."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        """First line of `contents`, quotes kept (Search-R1 shows it as `Doc i(Title: "X")`)."""
        return self.contents.split("\n", 1)[0]

    @property
    def text(self) -> str:
        """Everything after the first line."""
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""


@dataclass(frozen=True)
class Hit:
    """A retrieved document and its score (higher is better; scale depends on the retriever)."""

    document: Document
    score: float


@dataclass(frozen=True)
class Question:
    """A QA example. `uid` is unique across every source in a mix; it is the GRPO group id."""

    uid: str
    question: str
    golden_answers: tuple[str, ...]
    source: str = ""
    hops: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    prompt: str = field(default="", compare=False)
    """The user message the question's file gives as its prompt (Search-R1 parquet's
    `prompt` column), used as written by the rollout (`rollout.file_prompt`); empty: the
    configured template is filled with `question`."""


@dataclass
class Segment:
    """A contiguous run of tokens with one author: the model (`policy`), the environment
    (`env`: passages, feedback, forced prompts) or the Search-R2 refiner (`meta`)."""

    role: Role
    text: str
    token_ids: list[int]
    logprobs: list[float] | None = field(default=None, compare=False)
    """Behaviour log-probs of a `policy` segment's tokens as the generation engine sampled
    them (its precision, after temperature/top-p); the trainer compares them with its own to
    correct an engine/trainer mismatch. None for env text and older files. Not part of
    equality: two segments are the same when their role, text and tokens are."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown segment role {self.role!r}; expected one of {ROLES}")


@dataclass
class SearchCall:
    """One executed search: the query the policy wrote and the doc ids that came back."""

    query: str
    doc_ids: list[str]
    turn: int


@dataclass
class TrajectoryStats:
    """Counters filled by the rollout engine; they feed `env/*` metrics and evaluation tables."""

    turns: int = 0
    searches: int = 0
    valid_actions: int = 0
    invalid_actions: int = 0
    policy_tokens: int = 0
    env_tokens: int = 0
    truncated: bool = False
    info_truncated: int = 0
    stop_reason: str = ""
    retrieval_s: float = 0.0
    generation_s: float = 0.0
    failed: str | None = None


@dataclass
class MetaDecision:
    """One reading of a trajectory by the Search-R2 Meta-Refiner: the meta prompt it saw, the
    integer it answered (a `meta` segment holding exactly that candidate's token ids, so joint
    optimization trains on the tokens that were scored) and the evidence behind it."""

    prompt: str
    prompt_ids: list[int]
    decision: Segment
    cut_step: int
    """0 = accepted; k ≥ 1 = the step the trajectory was cut at (steps before k kept)."""
    steps: int
    """T, the number of steps the prompt numbered."""
    log_odds: float
    """log P(revise) − log P(no revision), with P(revise) = Σ_{k=1..T} P(answer k)."""
    answer_logprobs: list[float] = field(default_factory=list)
    """log P(answer k) for k = 0..T under the meta prompt."""
    prior: float = 0.0
    """Log-odds of the content-free meta prompt with the same T (`refiner.calibration`; 0
    uncalibrated): the discriminator compares `log_odds − prior` with τ."""


@dataclass
class Refinement:
    """What the Search-R2 Meta-Refiner did to this trajectory (None on the Trajectory if off).

    `prefix_segments` is the index of the first regenerated segment (the segments before it
    are the original's, token for token); `cut_step` the step regeneration started at (last
    revision; 0 when accepted as generated)."""

    revised: bool
    cut_step: int
    prefix_segments: int
    log_odds: float = 0.0
    """The number τ was compared with at the first decision: its log-odds of revising, less
    its prior when calibrated, or with `refiner.discriminator: confidence` the Actor's log
    surprisal ratio (`refiner.confidence`)."""
    revisions: int = 0
    """Cut-and-regenerate rounds applied (≤ `refiner.max_revisions`)."""
    decisions: list[MetaDecision] = field(default_factory=list)
    """Every Meta-Refiner call on this trajectory, in order."""
    original_answer: str | None = None
    """The answer of the trajectory as the Actor first generated it."""
    original_em: float | None = None
    """Its exact match, so a revision's outcome (wrong→right …) can be read from the file."""


@dataclass
class Trajectory:
    """A question, the prompt it was rendered to, and the response as ordered segments.

    `prompt_ids` are the tokens before the first response token (chat template included);
    `segments` are everything after. Only `policy` (and, under joint optimization, `meta`)
    tokens are trained on.
    """

    id: str
    question: str
    golden_answers: list[str]
    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    answer: str | None = None
    searches: list[SearchCall] = field(default_factory=list)
    stats: TrajectoryStats = field(default_factory=TrajectoryStats)
    metrics: dict[str, float] = field(default_factory=dict)
    reward: dict[str, float] = field(default_factory=dict)
    uid: str = ""
    sample: int = 0
    refinement: Refinement | None = None

    def append(
        self,
        role: Role,
        text: str,
        token_ids: list[int],
        logprobs: list[float] | None = None,
    ) -> Segment:
        """Add a segment; consecutive segments of the same role stay separate on purpose
        (each generation turn or observation is its own unit for the refiner's step numbering)."""
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise ValueError(f"{len(logprobs)} log-probs for {len(token_ids)} tokens")
        kept = list(logprobs) if logprobs is not None else None
        segment = Segment(role=role, text=text, token_ids=list(token_ids), logprobs=kept)
        self.segments.append(segment)
        if role == "policy":
            self.stats.policy_tokens += len(segment.token_ids)
        elif role == "env":
            self.stats.env_tokens += len(segment.token_ids)
        return segment

    @property
    def response_ids(self) -> list[int]:
        """All response tokens in order (what follows the prompt)."""
        return [t for s in self.segments for t in s.token_ids]

    @property
    def response_text(self) -> str:
        """The response as text, joined from the segments (never re-tokenized)."""
        return "".join(s.text for s in self.segments)

    def loss_mask(self, include_meta: bool = False) -> list[int]:
        """1 for each response token the model is trained on, aligned with `response_ids`."""
        trained = {"policy", "meta"} if include_meta else {"policy"}
        return [int(s.role in trained) for s in self.segments for _ in s.token_ids]

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON dict; `Trajectory.from_json(t.to_json()) == t`."""
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Trajectory:
        """Inverse of `to_json`; unknown keys are rejected so schema drift is caught early."""
        row = dict(row)
        row["segments"] = [Segment(**s) for s in row.get("segments", [])]
        row["searches"] = [SearchCall(**c) for c in row.get("searches", [])]
        row["stats"] = TrajectoryStats(**row.get("stats", {}))
        refinement = row.get("refinement")
        row["refinement"] = _refinement_from_json(refinement) if refinement else None
        return cls(**row)


def _refinement_from_json(row: dict[str, Any]) -> Refinement:
    row = dict(row)
    row["decisions"] = [
        MetaDecision(**{**d, "decision": Segment(**d["decision"])})
        for d in row.get("decisions", [])
    ]
    return Refinement(**row)
