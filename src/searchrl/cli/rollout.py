"""`searchrl` subcommands for the rollout stage: `rollout` (a question file → a trajectory file
and a metrics table) and `chat` (ask questions on stdin, watch the model think, search and
answer). Each checks its inputs (files, search engine, output) before anything heavy loads,
then parses options into configs and calls one function of `searchrl.rollout.runner`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from searchrl.cli.common import ForceOption, newest_trained_model, one_of, require_file
from searchrl.cli.generation import token_progress
from searchrl.config.loading import from_dict, parse_value
from searchrl.config.model import ModelConfig
from searchrl.config.retrieval import RemoteConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.benchmarks import DataError, load_questions
from searchrl.retrieval.base import Retriever
from searchrl.types import Question, Segment, Trajectory
from searchrl.utils.output import check_output
from searchrl.utils.progress import progress_bar
from searchrl.utils.threads import current_threads

ROLE_STYLES = {"policy": "green", "env": "blue", "meta": "magenta"}

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Hub id, local dir, .gguf file, or 'embedded' (the base model). Default: the "
        "newest trained model under runs/, else the embedded base model.",
    ),
]
IndexOption = Annotated[
    Path | None, typer.Option("--index", help="Index directory built by `searchrl index`.")
]
UrlOption = Annotated[
    str | None, typer.Option("--url", help="A Search-R1 compatible /retrieve server instead.")
]
GreedyOption = Annotated[bool, typer.Option("--greedy", help="Greedy decoding (temperature 0).")]
TemperatureOption = Annotated[
    float | None, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")
]
SeedOption = Annotated[
    int, typer.Option(help="Rollout seed (per-trajectory seeds derive from it).")
]
RefineOption = Annotated[
    float | None,
    typer.Option(
        "--refine",
        help="Search-R2: after each answer, let the Meta-Refiner read the trajectory with this "
        "margin τ (0 = the paper's) and cut and regenerate it when it revises; prints the "
        "decision, the cut and the regenerated suffix.",
    ),
]
OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Config overrides: model.dtype=bfloat16 rollout.topk=5 …"),
]


def _configs(
    model: str | None, greedy: bool, temperature: float | None, overrides: list[str]
) -> tuple[ModelConfig, RolloutConfig, bool]:
    """ModelConfig and RolloutConfig from `section.key=value` overrides plus the flags, and
    whether the model was chosen explicitly."""
    sections: dict[str, dict[str, Any]] = {"model": {}, "rollout": {}}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, field = key.partition(".")
        if not sep or not dot or not field or section not in sections:
            raise typer.BadParameter(f"{item!r}: expected model.<key>=<value> or rollout.<...>")
        sections[section][field] = parse_value(raw, key)
    if model is not None:
        sections["model"]["name_or_path"] = model
    if greedy or temperature is not None:
        sections["rollout"]["temperature"] = 0.0 if greedy else temperature
    explicit = "name_or_path" in sections["model"]
    model_config = from_dict(ModelConfig, sections["model"], prefix="model.")
    rollout_config = from_dict(RolloutConfig, sections["rollout"], prefix="rollout.")
    return model_config, rollout_config, explicit


def _default_model(config: ModelConfig, explicit: bool, console: Console) -> ModelConfig:
    """Without --model: the newest trained model of a run, said in one line; or the base
    model, with a one-line warning that it was never taught the search protocol."""
    if explicit:
        return config
    trained = newest_trained_model()
    if trained is not None:
        console.print(
            f"model: {trained} (newest trained model under runs/; --model embedded for the base)",
            style="dim",
        )
        return replace(config, name_or_path=str(trained))
    console.print(
        "warning: no trained model under runs/; the base model was never taught to use "
        "<search> and will rarely search (run `searchrl demo` first, or pass --model)",
        style="yellow",
    )
    return config


def _check_engine(index: Path | None, url: str | None) -> None:
    """Fail in seconds, before a model loads, when the search engine is not usable: an index
    directory must have a readable manifest; a server must answer one query."""
    one_of(index, url)
    if index is not None:
        from searchrl.retrieval.manifest import read_manifest

        read_manifest(index)
    else:
        from searchrl.retrieval.remote import RemoteRetriever

        remote = from_dict(RemoteConfig, {"url": url}, prefix="remote.")
        with RemoteRetriever(remote) as probe:
            probe.search(["probe"], 1)


def _open_engine(index: Path | None, url: str | None) -> Retriever:
    from searchrl.rollout.runner import open_retriever

    return open_retriever(index, url)


def _questions(data: Path, limit: int | None) -> list[Question]:
    questions = load_questions(require_file(data, "question file"))[:limit]
    if not questions:
        raise DataError(f"{data}: no questions in the file")
    return questions


def rollout(
    data: Annotated[Path, typer.Option(help="Questions: FlashRAG JSONL or Search-R1 parquet.")],
    out: Annotated[Path, typer.Option(help="Trajectory file to write (JSONL).")],
    model: ModelOption = None,
    index: IndexOption = None,
    url: UrlOption = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Use only the first N questions.")
    ] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="Samples per question.")] = 1,
    greedy: GreedyOption = False,
    temperature: TemperatureOption = None,
    seed: SeedOption = 0,
    force: ForceOption = False,
    overrides: OverridesArgument = None,
) -> None:
    """Roll out a question file with search; write trajectories and print EM/F1/SubEM."""
    one_of(index, url)
    check_output(out, force=force, kind="file")
    model_config, rollout_config, explicit = _configs(model, greedy, temperature, overrides or [])
    questions = _questions(data, limit)
    _check_engine(index, url)
    console = Console(stderr=True, highlight=False)
    model_config = _default_model(model_config, explicit, console)
    console.print(f"torch: {current_threads().describe()}", style="dim")
    # torch/transformers load here, not at import, so `searchrl --help` stays instant.
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import rollout_to_file

    retriever = _open_engine(index, url)
    policy = load_policy(model_config, max_model_len=rollout_config.max_total_tokens, seed=seed)
    with progress_bar("rollout", len(questions), console=console, unit="questions") as advance:
        summary = rollout_to_file(
            policy, retriever, questions, rollout_config, out, n_samples=n, seed=seed,
            force=force, chunk=max(1, model_config.generation_batch_size // n), progress=advance,
        )  # fmt: skip
    table = Table(title=f"{data.name} → {out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in summary.rows():
        table.add_row(name, value)
    Console().print(table)


def chat(
    model: ModelOption = None,
    index: IndexOption = None,
    url: UrlOption = None,
    greedy: GreedyOption = False,
    temperature: TemperatureOption = None,
    seed: SeedOption = 0,
    refine: RefineOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Ask questions (one per line on stdin) and watch the model reason, search and answer:
    model text in green, inserted search results and feedback in blue, Meta-Refiner
    decisions (`--refine`) in magenta."""
    model_config, rollout_config, explicit = _configs(model, greedy, temperature, overrides or [])
    _check_engine(index, url)
    console = Console(highlight=False)
    model_config = _default_model(model_config, explicit, console)
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import answer_question

    retriever = _open_engine(index, url)
    console.print(
        f"loading {model_config.name_or_path} ({current_threads().describe()}) …", style="dim"
    )
    policy = load_policy(model_config, max_model_len=rollout_config.max_total_tokens, seed=seed)
    console.print("Ask a question (Ctrl-D to quit).", style="bold")

    for number, line in enumerate(sys.stdin, start=1):
        question = line.strip()
        if not question:
            continue
        console.print(Text(f"\n? {question}\n", style="bold"))
        budget = rollout_config.max_response_tokens
        with token_progress(policy.model, budget, console) as end_turn:

            def show(_: Trajectory, segment: Segment) -> None:
                end_turn()
                console.print(Text(segment.text, style=ROLE_STYLES[segment.role]), end="")

            traj = answer_question(
                policy, retriever, question, rollout_config,
                uid=f"chat-{number}", seed=seed, observer=show,
            )  # fmt: skip
        stats = traj.stats
        console.print(
            Text(f"\n→ answer: {traj.answer}", style="bold yellow"),
            Text(f"  ({stats.searches} searches, {stats.turns} turns, {stats.stop_reason})"),
        )
        if refine is not None:
            refined = _refine(policy, retriever, rollout_config, traj, refine, seed)
            show_refinement(console, refined)


def _refine(
    policy: Any,
    retriever: Retriever,
    config: RolloutConfig,
    traj: Trajectory,
    margin: float,
    seed: int,
) -> Trajectory:
    """One Meta-Refiner pass (argmax cut; regeneration sampled, at temperature 1 when the chat
    decodes greedily, since a greedy regeneration would repeat the cut suffix)."""
    from searchrl.config.refiner import RefinerConfig
    from searchrl.refiner import MetaRefiner

    if policy.model is None:
        raise typer.BadParameter("--refine needs the model's weights (not the vllm backend)")
    settings = config if config.temperature > 0 else replace(config, temperature=1.0)
    refiner_config = RefinerConfig(
        enabled=True, margin=margin, probe_share=0.0, random_cut_probe=False
    )
    pad = policy.tokenizer.pad_token_id
    refiner = MetaRefiner(
        policy.model, policy.tokenizer, policy.backend, retriever, settings, refiner_config,
        int(pad if pad is not None else policy.tokenizer.eos_token_id),
    )  # fmt: skip
    return refiner.refine([traj], seed=seed, greedy=True).final[0]


def show_refinement(console: Console, traj: Trajectory) -> None:
    """The Meta-Refiner's decision, the score its discriminator thresholded (the log-odds of
    revising, or the confidence discriminator's log surprisal ratio), the cut and the
    regenerated suffix."""
    record = traj.refinement
    if record is None or not record.decisions:
        console.print(Text("meta-refiner: nothing to read", style="magenta"))
        return
    first = record.decisions[0]
    verdict = f"revise, cut at step {record.cut_step}" if record.revised else "accept"
    console.print(
        Text(
            f"meta-refiner: answered {first.cut_step} of 0..{first.steps} "
            f"(discriminator score {record.log_odds:+.2f}) → {verdict}",
            style="bold magenta",
        )
    )
    if not record.revised:
        return
    console.print(Text("✂ regenerated from the cut:", style="magenta"))
    for segment in traj.segments[record.prefix_segments :]:
        console.print(Text(segment.text, style=ROLE_STYLES[segment.role]), end="")
    console.print(
        Text(
            f"\n→ refined answer: {traj.answer} (was {record.original_answer})", style="bold yellow"
        )
    )


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("rollout")(rollout)
    app.command("chat")(chat)
