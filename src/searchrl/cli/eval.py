"""`searchrl eval` (one method over question sets, resumable), `searchrl eval compare A B`
(paired tests on the questions both evaluated) and `searchrl eval judge A B` (the six-dimension
trajectory-quality rubric). Each parses options into configs and calls one function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from searchrl.cli.common import ForceOption
from searchrl.config.eval import EvalConfig, RubricConfig
from searchrl.config.loading import from_dict

app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
)

METHOD_HELP = (
    "direct, cot, rag, ircot, search-o1, direct-ft, rag-ft, r1, sft, rejection, search-r1, "
    "search-r2"
)
DATA_HELP = (
    "Question set, repeatable: a .jsonl/.parquet file, a folder of them, a FlashRAG root "
    "(one folder per set; its test split, or dev where the papers use dev), a world split "
    "(runs/x/world/test.jsonl), hf:NAME[:SPLIT], or FILE[a:b] for its rows a..b-1."
)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Config override, repeatable: --set rollout.max_turns=2"),
]


def _config(cls: type, values: dict[str, Any], overrides: list[str]) -> Any:
    """`cls` from flag values plus `section.key=value` overrides (overrides win)."""
    data: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: expected key=value")
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    return from_dict(cls, data)


@app.callback()
def evaluate(
    ctx: typer.Context,
    method: Annotated[str | None, typer.Option(help=METHOD_HELP)] = None,
    data: Annotated[list[str] | None, typer.Option(help=DATA_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="Evaluation folder (resumable).")] = None,
    index: Annotated[Path | None, typer.Option(help="Index built by `searchrl index`.")] = None,
    url: Annotated[str | None, typer.Option(help="A Search-R1 /retrieve server instead.")] = None,
    model: Annotated[
        str | None, typer.Option(help="Checkpoint dir, hub id, .gguf or 'embedded'.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="First N questions of each set.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Questions per batch.")] = None,
    overrides: SetOption = None,
) -> None:
    """Score a method the way the papers' Table 2 does: EM/F1/SubEM, searches, turns, tokens
    and latency per question, aggregates with 95% bootstrap intervals. Rerunning the same
    command completes an interrupted run or skips a finished one."""
    if ctx.invoked_subcommand is not None:
        return
    if method is None or not data or out is None:
        raise typer.BadParameter("--method, --data and --out are required")
    from searchrl.eval.harness import evaluate, retriever_identity
    from searchrl.eval.registry import method as lookup
    from searchrl.eval.sets import load_sets

    values: dict[str, Any] = {"method": method, "limit": limit, "batch_size": batch_size}
    if model is not None:
        values["model"] = {"name_or_path": model}
    config: EvalConfig = _config(EvalConfig, values, overrides or [])
    spec = _spec(lookup, config.method)
    if spec.trained and model is None:
        raise typer.BadParameter(f"{spec.name} evaluates a trained policy: give --model")
    if spec.retrieval and (index is None) == (url is None):
        raise typer.BadParameter(f"{spec.name} searches: give exactly one of --index or --url")
    identity = retriever_identity(index, url) if spec.retrieval else None
    questions = load_sets(data, config.limit)
    summary = evaluate(config, questions, out, _resources(config, index, url, identity))
    _print_summary(summary, out)


def _spec(lookup: Any, name: str) -> Any:
    try:
        return lookup(name)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err


def _resources(
    config: EvalConfig, index: Path | None, url: str | None, identity: dict[str, Any] | None
) -> Any:
    from searchrl.eval.harness import Resources
    from searchrl.models.loading import load_policy
    from searchrl.rollout.runner import open_retriever

    return Resources(
        open_retriever=lambda: open_retriever(index, url),
        load_policy=lambda: load_policy(
            config.model, max_model_len=config.rollout.max_total_tokens, seed=config.seed
        ),
        retriever=identity,
    )


def _fmt(estimate: dict[str, Any]) -> str:
    return f"{estimate['mean']:.3f} [{estimate['low']:.3f}, {estimate['high']:.3f}]"


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    table = Table(title=f"{summary['method']} ({summary['model']}) → {out}")
    for column in ("set", "n", "EM [95% CI]", "F1", "SubEM", "searches", "tokens"):
        table.add_column(column, justify="left" if column == "set" else "right")
    blocks = [*summary["by_set"].items(), ("overall", summary["overall"])]
    for name, block in blocks:
        table.add_row(
            name,
            str(block["n"]),
            _fmt(block["em"]),
            f"{block['f1']['mean']:.3f}",
            f"{block['subem']['mean']:.3f}",
            f"{block['searches']['mean']:.2f}",
            f"{block['tokens']['mean']:.0f}",
        )
    average = summary["average"]
    table.add_row(
        "Avg. (mean of sets)",
        "",
        _fmt(average["em"]),
        f"{average['f1']['mean']:.3f}",
        f"{average['subem']['mean']:.3f}",
        "",
        "",
    )
    console = Console()
    console.print(table)
    if "actor" in summary:
        actor, gain = summary["actor"], summary["actor"]["refinement_gain_em"]
        console.print(
            f"Actor alone, refiner off (the paper's number): EM {_fmt(actor['em'])}; with "
            f"test-time refinement: EM {summary['overall']['em']['mean']:.3f}, "
            f"gain {gain['diff']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}], "
            f"{actor['revised']:.0%} revised"
        )
    if summary["missing"]:
        console.print(
            f"[yellow]{summary['missing']} questions have no result (retrieval "
            "failed): rerun the same command to retry them[/yellow]"
        )


@app.command("compare")
def compare(
    first: Annotated[Path, typer.Argument(help="Evaluation folder A.")],
    second: Annotated[Path, typer.Argument(help="Evaluation folder B.")],
    metric: Annotated[str, typer.Option(help="em, f1, subem, searches, …")] = "em",
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON.")] = None,
    force: ForceOption = False,
) -> None:
    """A vs B on the questions both answered: mean difference with a paired-bootstrap 95%
    interval, wins/losses/ties and the sign-test p-value, per set, pooled ("overall") and on
    the papers' "Avg." over sets (stratified sign-flip test)."""
    from searchrl.eval.compare import compare_runs, write_json
    from searchrl.utils.output import check_output

    if out is not None:
        check_output(out, force=force)
    result = compare_runs(first, second, metric)
    table = Table(title=f"{metric}: A = {first}  vs  B = {second}")
    for column in ("set", "n", "A", "B", "A − B [95% CI]", "A wins", "B wins", "ties", "p"):
        table.add_column(column, justify="left" if column == "set" else "right")
    for name, r in result["rows"].items():
        table.add_row(
            name,
            str(r["n"]),
            f"{r['mean_a']:.3f}",
            f"{r['mean_b']:.3f}",
            f"{r['diff']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]",
            str(r["wins"]),
            str(r["losses"]),
            str(r["ties"]),
            f"{r['p_value']:.3g}",
        )
    Console().print(table)
    if result["unmatched"]:
        typer.echo(f"{result['unmatched']} questions are in only one of the two runs (left out)")
    if out is not None:
        write_json(result, out, force=force)


@app.command("judge")
def judge(
    first: Annotated[Path, typer.Argument(help="Evaluation folder A.")],
    second: Annotated[Path, typer.Argument(help="Evaluation folder B.")],
    kind: Annotated[str | None, typer.Option(help="rule, llm or hybrid.")] = None,
    url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL (…/v1).")] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model")] = None,
    per_set: Annotated[int | None, typer.Option(help="Pairs sampled per set.")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON.")] = None,
    overrides: SetOption = None,
    force: ForceOption = False,
) -> None:
    """Trajectory quality (Search-R2 §5.6): six rubric dimensions scored 0/1/2 for each
    trajectory of a pair, each on its own (`--set shown=pair` shows both, order randomised);
    wins, losses and ties of A per dimension."""
    from searchrl.eval.compare import write_json
    from searchrl.eval.rubric import DIMENSIONS, judge_runs
    from searchrl.utils.output import check_output

    if out is not None:
        check_output(out, force=force)

    values = {"kind": kind, "url": url, "model": judge_model, "per_set": per_set}
    config: RubricConfig = _config(RubricConfig, values, overrides or [])
    result = judge_runs(first, second, config)
    table = Table(title=f"trajectory quality: A = {first}  vs  B = {second} ({config.kind})")
    for column in ("dimension", "A wins", "B wins", "ties", "not scored"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for dim in DIMENSIONS:
        c = result["overall"][dim]
        table.add_row(dim, str(c["wins"]), str(c["losses"]), str(c["ties"]), str(c["unscored"]))
    Console().print(table)
    typer.echo(f"{result['pairs']} pairs")
    if out is not None:
        write_json(result, out, force=force)


def register(root: typer.Typer) -> None:
    """Attach `eval` and its subcommands to the top-level app."""
    root.add_typer(app, name="eval")
