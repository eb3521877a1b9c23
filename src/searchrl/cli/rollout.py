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
from searchrl.cli.options import (
    ConfigOption,
    IndexOption,
    ModelOption,
    OverridesArgument,
    RunSettingsOption,
    SeedOption,
    SetOption,
    UrlOption,
    describe_adopted,
    joined,
    resolve_model,
    run_rollout,
    settings,
)
from searchrl.config.interactive import InteractiveConfig
from searchrl.config.loading import from_dict, parse_overrides, read_yaml
from searchrl.config.model import ModelConfig
from searchrl.config.presets import resolve_config
from searchrl.config.retrieval import RemoteConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.benchmarks import DataError, load_questions
from searchrl.retrieval.base import Retriever
from searchrl.types import Question, Segment, Trajectory
from searchrl.utils.output import check_output
from searchrl.utils.progress import progress_bar
from searchrl.utils.threads import current_threads

ROLE_STYLES = {"policy": "green", "env": "blue", "meta": "magenta"}

GreedyOption = Annotated[bool, typer.Option("--greedy", help="Greedy decoding (temperature 0).")]
TemperatureOption = Annotated[
    float | None, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")
]
RefineOption = Annotated[
    float | None,
    typer.Option(
        "--refine",
        min=-100.0,
        max=100.0,
        help="Search-R2: after each answer, let the Meta-Refiner read the trajectory with this "
        "margin τ (0 = the paper's) and cut and regenerate it when it revises; prints the "
        "decision, the cut and the regenerated suffix.",
    ),
]


def _model_named(model: str | None, config: str | None, overrides: list[str]) -> bool:
    """Whether the command line or the --config file names the model."""
    if model is not None or "name_or_path" in parse_overrides(overrides).get("model", {}):
        return True
    named = read_yaml(resolve_config(config)).get("model", {}) if config else {}
    return isinstance(named, dict) and "name_or_path" in named


def _settings(
    options: dict[str, Any], config: str | None, overrides: list[str], run_settings: bool,
    console: Console,
) -> InteractiveConfig:  # fmt: skip
    """The settings of `rollout`/`chat`: the model (the newest trained one under runs/ when
    none is named) and, for a trained run's model, that run's rollout settings; both are
    said in one line each."""
    flags = {**options, "model.name_or_path": resolve_model(options["model.name_or_path"])}
    first = settings(InteractiveConfig, config, overrides, flags)
    explicit = _model_named(options["model.name_or_path"], config, overrides)
    chosen = _default_model(first.model, explicit, console).name_or_path
    if explicit:
        console.print(f"model: {chosen}", style="dim", soft_wrap=True)
    flags["model.name_or_path"] = chosen
    adopted = run_rollout(chosen) if run_settings else None
    if adopted is not None:
        line = describe_adopted(*adopted, InteractiveConfig().rollout)
        console.print(line, style="dim", soft_wrap=True)
    base = {"rollout": adopted[1]} if adopted is not None else None
    return settings(InteractiveConfig, config, overrides, flags, base)


def _sampling(greedy: bool, temperature: float | None) -> float | None:
    return 0.0 if greedy else temperature


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
            soft_wrap=True,
        )
        return replace(config, name_or_path=str(trained))
    console.print(
        "warning: no trained model under runs/; the base model was never taught to use "
        "<search> and will rarely search (run `searchrl demo` first, or pass --model)",
        style="yellow",
        soft_wrap=True,
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

        # one quick retry: this only asks whether a server answers, before a model loads
        remote = from_dict(RemoteConfig, {"url": url, "retries": 1}, prefix="remote.")
        with RemoteRetriever(remote) as probe:
            probe.search(["probe"], 1)


def _open_engine(index: Path | None, url: str | None) -> Retriever:
    from searchrl.rollout.runner import open_retriever

    return open_retriever(index, url)


def _questions(data: Path, limit: int | None) -> list[Question]:
    """The file's questions (`FILE[a:b]`: its rows a..b-1, as `eval --data` and
    `data.train_files` read them), the first `limit` of them."""
    from searchrl.data.sources import load_spec, parse_spec

    spec = parse_spec(str(data))
    if spec.start is not None or spec.stop is not None:
        require_file(spec.path, "question file")
        questions = load_spec(spec, "test")[:limit]
    else:
        questions = load_questions(require_file(data, "question file"))[:limit]
    if not questions:
        raise DataError(f"{data}: no questions in the file")
    return questions


def rollout(
    data: Annotated[
        Path,
        typer.Option(help="Questions: FlashRAG JSONL or Search-R1 parquet; FILE[a:b]: rows a..b-1"),
    ],
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
    seed: SeedOption = None,
    force: ForceOption = False,
    config: ConfigOption = None,
    run_settings: RunSettingsOption = True,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Roll out a question file with search; write trajectories and print EM/F1/SubEM.
    Without --model: the newest trained model under runs/ (said in one line)."""
    one_of(index, url)
    check_output(out, force=force, kind="file")
    console = Console(stderr=True, highlight=False)
    options = {"seed": seed, "model.name_or_path": model,
               "rollout.temperature": _sampling(greedy, temperature)}  # fmt: skip
    run = _settings(options, config, joined(sets, overrides), run_settings, console)
    questions = _questions(data, limit)
    _check_engine(index, url)
    console.print(f"torch: {current_threads().describe()}", style="dim")
    # torch/transformers load here, not at import, so `searchrl --help` stays instant.
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import rollout_to_file

    retriever = _open_engine(index, url)
    policy = load_policy(run.model, max_model_len=run.rollout.max_total_tokens, seed=run.seed)
    with progress_bar("rollout", len(questions), console=console, unit="questions") as advance:
        summary = rollout_to_file(
            policy, retriever, questions, run.rollout, out, n_samples=n, seed=run.seed,
            force=force, chunk=max(1, run.model.generation_batch_size // n), progress=advance,
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
    seed: SeedOption = None,
    refine: RefineOption = None,
    config: ConfigOption = None,
    run_settings: RunSettingsOption = True,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Ask questions (one per line on stdin) and watch the model reason, search and answer:
    model text in green, inserted search results and feedback in blue, Meta-Refiner
    decisions (`--refine`) in magenta. Without --model: the newest trained model under runs/."""
    console = Console(highlight=False)
    options = {"seed": seed, "model.name_or_path": model,
               "rollout.temperature": _sampling(greedy, temperature)}  # fmt: skip
    run = _settings(options, config, joined(sets, overrides), run_settings, console)
    rollout_config, seed = run.rollout, run.seed
    _check_engine(index, url)
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import answer_question

    retriever = _open_engine(index, url)
    console.print(
        f"loading {run.model.name_or_path} ({current_threads().describe()}) …", style="dim"
    )
    policy = load_policy(run.model, max_model_len=rollout_config.max_total_tokens, seed=seed)
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
