"""The single-turn methods and trained policies (IRCoT and Search-o1 are in `eval.agents`; the
table of names is `eval.registry`), each a small strategy over one generation backend and one
retriever, batched across questions.

| method     | what runs                                                                 |
|------------|---------------------------------------------------------------------------|
| direct     | one turn, `direct_prompt`, no retrieval                                   |
| cot        | one turn, `cot_prompt` (think, then answer), no retrieval                 |
| rag        | top-k passages for the question (one batched search), `rag_prompt`, one turn |
| ircot      | every reasoning line is the next query (`eval.agents`)                    |
| search-o1  | agentic search, documents condensed by Reason-in-Documents (`eval.agents`) |
| r1         | a policy trained without search: the rollout engine with `search=False`    |
| sft, rejection, search-r1 | a trained policy: the Search-R1 rollout engine            |
| search-r2  | the Search-R1 rollout, then the Meta-Refiner (argmax trimmer, `refiner.*`)  |

Single-turn methods reuse the rollout engine with search off, so every method's output is the
same `Trajectory` record, scored by the same metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from torch import nn

from searchrl.config.errors import ConfigError
from searchrl.config.eval import EvalConfig
from searchrl.data.templates import cot_prompt, direct_prompt, rag_prompt, render_chat
from searchrl.models.generation import GenerationBackend
from searchrl.refiner import MetaRefiner
from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.reward.metrics import answer_metrics
from searchrl.rollout.loop import RolloutEngine, run_rollouts
from searchrl.rollout.sampler import encode_prompt, fresh_trajectories
from searchrl.types import Hit, Question, SearchCall, Trajectory


@dataclass
class Context:
    """What a method runs with. `retriever` is None for methods that never retrieve."""

    backend: GenerationBackend
    tokenizer: object
    retriever: Retriever | None
    config: EvalConfig
    model: nn.Module | None = None
    """The transformers module behind the backend (None for vLLM): the Meta-Refiner scores
    its candidate answers with it."""


@dataclass
class Outcome:
    """One question's result: its trajectory, plus tokens generated outside it (Search-o1's
    Reason-in-Documents calls), which count towards the method's cost."""

    trajectory: Trajectory
    aux_tokens: int = 0


RunFn = Callable[[Sequence[Question], Context], list[Outcome]]
StreamFn = Callable[[Sequence[Question], Context, int], Iterator[Outcome]]
"""A method that keeps `width` questions in flight and yields each outcome when it is done."""


class NoRetriever:
    """Stands in for the search engine of methods that must never search."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        raise RetrievalError("this method has no search engine")


@dataclass
class RecordingRetriever:
    """Wraps the retriever and remembers the text of every document it returned, so each
    evaluation row can carry the passages its trajectory saw (the report shows them)."""

    inner: Retriever
    documents: dict[str, str] = field(default_factory=dict)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        results = self.inner.search(queries, k)
        for hits in results:
            for hit in hits:
                self.documents[hit.document.id] = hit.document.contents
        return results


def start_trajectory(question: Question, text: str, ctx: Context) -> Trajectory:
    """An empty trajectory whose prompt is `text` (inside the chat template when configured)."""
    chat = ctx.config.rollout.use_chat_template
    prompt = render_chat(ctx.tokenizer, text) if chat else text  # type: ignore[arg-type]
    return Trajectory(
        id=question.uid,
        question=question.question,
        golden_answers=list(question.golden_answers),
        prompt=prompt,
        prompt_ids=encode_prompt(ctx.tokenizer, prompt, chat),
        uid=question.uid,
    )


def one_turn(starts: list[Trajectory], ctx: Context, *, bare_answer: bool) -> list[Outcome]:
    """Generate one turn for every start (the rollout engine with search off). With
    `bare_answer`, a reply without `<answer>` tags counts its first line as the answer: the
    Direct and RAG prompts ask for the answer alone, and FlashRAG scores their raw output."""
    config = replace(ctx.config.rollout, search=False)
    engine = RolloutEngine(ctx.backend, ctx.tokenizer, NoRetriever(), config, ctx.config.seed)
    finished = engine.run(starts)
    if bare_answer:
        for traj in finished:
            if traj.answer is None:
                traj.answer = _first_line(traj, ctx.tokenizer)
                traj.metrics = answer_metrics(traj.answer, traj.golden_answers)
    return [Outcome(t) for t in finished]


def _first_line(traj: Trajectory, tokenizer: object) -> str | None:
    ids = [t for s in traj.segments if s.role == "policy" for t in s.token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True).strip()  # type: ignore[attr-defined]
    line = text.split("\n", 1)[0].strip()
    return line or None


def run_direct(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """Direct inference: the question alone."""
    starts = [start_trajectory(q, direct_prompt(q.question), ctx) for q in questions]
    return one_turn(starts, ctx, bare_answer=True)


def run_cot(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """Chain of thought without retrieval."""
    starts = [start_trajectory(q, cot_prompt(q.question), ctx) for q in questions]
    return one_turn(starts, ctx, bare_answer=False)


def run_rag(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """One batched search with the questions as queries, top-k passages in the prompt."""
    assert ctx.retriever is not None
    topk = ctx.config.rollout.topk
    try:
        results = ctx.retriever.search([q.question for q in questions], topk)
        failure = None
    except RetrievalError as err:
        results, failure = [[] for _ in questions], f"retrieval: {err}"
    starts = []
    for question, hits in zip(questions, results, strict=True):
        hits = hits[:topk]
        traj = start_trajectory(question, rag_prompt(question.question, _contents(hits)), ctx)
        traj.searches.append(SearchCall(question.question, [h.document.id for h in hits], 0))
        traj.stats.searches = 1
        traj.stats.failed = failure
        starts.append(traj)
    return one_turn(starts, ctx, bare_answer=True)


def _contents(hits: Sequence[Hit]) -> list[str]:
    return [h.document.contents for h in hits]


def policy_method(search: bool) -> RunFn:
    """A trained policy through the rollout engine (Search-R1 prompt and search, or the R1
    prompt without search)."""

    def run(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
        config = replace(ctx.config.rollout, search=search)
        retriever = ctx.retriever if search and ctx.retriever is not None else NoRetriever()
        trajectories = run_rollouts(
            ctx.backend, ctx.tokenizer, retriever, questions, config, seed=ctx.config.seed
        )
        return [Outcome(t) for t in trajectories]

    return run


def policy_stream(search: bool) -> StreamFn:
    """`policy_method` with at most `width` questions in flight: a question enters as soon as
    another is done (`RolloutEngine.stream`), so one long trajectory shares its generation
    calls with new questions instead of holding a finished batch."""

    def stream(questions: Sequence[Question], ctx: Context, width: int) -> Iterator[Outcome]:
        config = replace(ctx.config.rollout, search=search)
        retriever = ctx.retriever if search and ctx.retriever is not None else NoRetriever()
        starts = fresh_trajectories(ctx.tokenizer, questions, 1, config)
        engine = RolloutEngine(ctx.backend, ctx.tokenizer, retriever, config, ctx.config.seed)
        for trajectory in engine.stream(starts, width):
            yield Outcome(trajectory)

    return stream


def run_search_r2(questions: Sequence[Question], ctx: Context) -> list[Outcome]:
    """Search-R2 at evaluation: the policy's rollout, then the Meta-Refiner with τ =
    `refiner.margin`, at most `refiner.max_revisions` rounds and the trimmer's argmax (no
    probes). Every trajectory keeps its `refinement` record. A greedy first pass is
    regenerated at temperature 1 (seeded): a greedy continuation would repeat the cut suffix."""
    if ctx.model is None and not callable(getattr(ctx.backend, "score", None)):
        raise ConfigError(
            "search-r2 reads the meta prompt with the policy's weights or on an engine that "
            "scores (vLLM); this backend does neither"
        )
    assert ctx.retriever is not None
    first = policy_method(search=True)(questions, ctx)
    rollout = ctx.config.rollout
    if rollout.temperature <= 0:
        rollout = replace(rollout, temperature=1.0)
    pad = ctx.tokenizer.pad_token_id  # type: ignore[attr-defined]
    refiner = MetaRefiner(
        ctx.model, ctx.tokenizer, ctx.backend, ctx.retriever, rollout, ctx.config.refiner,
        pad if pad is not None else 0,
    )  # fmt: skip
    outcome = refiner.refine(
        [o.trajectory for o in first], seed=ctx.config.seed, greedy=True, probe=False
    )
    return [Outcome(t) for t in outcome.final]
