"""`searchrl` subcommands for the rollout stage: `rollout` (a question file → a trajectory file
and a metrics table) and `chat` (ask questions on stdin, watch the model think, search and
answer). Each parses options into configs and calls one function of `searchrl.rollout.runner`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from searchrl.config.loading import from_dict
from searchrl.config.model import ModelConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.data.benchmarks import load_questions
from searchrl.types import Segment, Trajectory

ROLE_STYLES = {"policy": "green", "env": "blue", "meta": "magenta"}

ModelOption = Annotated[
    str | None,
    typer.Option("--model", help="Hub id, local dir, .gguf file, or 'embedded' (the default)."),
]
IndexOption = Annotated[
    Path | None, typer.Option("--index", help="Index directory built by `searchrl index`.")
]
UrlOption = Annotated[
    str | None, typer.Option("--url", help="A Search-R1 compatible /retrieve server instead.")
]
GreedyOption = Annotated[bool, typer.Option("--greedy", help="Greedy decoding (temperature 0).")]
TemperatureOption = Annotated[float | None, typer.Option(help="Sampling temperature.")]
SeedOption = Annotated[
    int, typer.Option(help="Rollout seed (per-trajectory seeds derive from it).")
]
OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Config overrides: model.dtype=bfloat16 rollout.topk=5 …"),
]


def _configs(
    model: str | None, greedy: bool, temperature: float | None, overrides: list[str]
) -> tuple[ModelConfig, RolloutConfig]:
    """ModelConfig and RolloutConfig from `section.key=value` overrides plus the flags."""
    sections: dict[str, dict[str, Any]] = {"model": {}, "rollout": {}}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, field = key.partition(".")
        if not sep or not dot or section not in sections:
            raise typer.BadParameter(f"{item!r}: expected model.<key>=<value> or rollout.<...>")
        sections[section][field] = yaml.safe_load(raw)
    if model is not None:
        sections["model"]["name_or_path"] = model
    if greedy or temperature is not None:
        sections["rollout"]["temperature"] = 0.0 if greedy else temperature
    return from_dict(ModelConfig, sections["model"]), from_dict(RolloutConfig, sections["rollout"])


def rollout(
    data: Annotated[Path, typer.Option(help="Questions: FlashRAG JSONL or Search-R1 parquet.")],
    out: Annotated[Path, typer.Option(help="Trajectory file to write (JSONL).")],
    model: ModelOption = None,
    index: IndexOption = None,
    url: UrlOption = None,
    limit: Annotated[int | None, typer.Option(help="Use only the first N questions.")] = None,
    n: Annotated[int, typer.Option("--n", help="Samples per question.")] = 1,
    greedy: GreedyOption = False,
    temperature: TemperatureOption = None,
    seed: SeedOption = 0,
    overrides: OverridesArgument = None,
) -> None:
    """Roll out a question file with search; write trajectories and print EM/F1/SubEM."""
    model_config, rollout_config = _configs(model, greedy, temperature, overrides or [])
    # torch/transformers load here, not at import, so `searchrl --help` stays instant.
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import open_retriever, rollout_to_file

    questions = load_questions(data)[:limit]
    retriever = open_retriever(index, url)
    policy = load_policy(model_config, max_model_len=rollout_config.max_total_tokens)
    summary = rollout_to_file(
        policy, retriever, questions, rollout_config, out, n_samples=n, seed=seed
    )
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
    overrides: OverridesArgument = None,
) -> None:
    """Ask questions (one per line on stdin) and watch the model reason, search and answer:
    model text in green, inserted search results and feedback in blue."""
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import answer_question, open_retriever

    model_config, rollout_config = _configs(model, greedy, temperature, overrides or [])
    console = Console(highlight=False)
    retriever = open_retriever(index, url)
    console.print(f"loading {model_config.name_or_path} …", style="dim")
    policy = load_policy(model_config, max_model_len=rollout_config.max_total_tokens)
    console.print("Ask a question (Ctrl-D to quit).", style="bold")

    def show(_: Trajectory, segment: Segment) -> None:
        console.print(Text(segment.text, style=ROLE_STYLES[segment.role]), end="")

    for number, line in enumerate(sys.stdin, start=1):
        question = line.strip()
        if not question:
            continue
        console.print(Text(f"\n? {question}\n", style="bold"))
        traj = answer_question(
            policy,
            retriever,
            question,
            rollout_config,
            uid=f"chat-{number}",
            seed=seed,
            observer=show,
        )
        stats = traj.stats
        console.print(
            Text(f"\n→ answer: {traj.answer}", style="bold yellow"),
            Text(f"  ({stats.searches} searches, {stats.turns} turns, {stats.stop_reason})"),
        )


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the top-level app."""
    app.command("rollout")(rollout)
    app.command("chat")(chat)
