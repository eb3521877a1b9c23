"""`searchrl eval` (one method over question sets, resumable), `searchrl eval compare A B`
(paired tests on the questions both evaluated) and `searchrl eval judge A B` (the six-dimension
trajectory-quality rubric). Each parses options into configs and calls one function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from searchrl.cli.common import ForceOption, wide_console
from searchrl.cli.options import (
    KEY,
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
from searchrl.config.eval import EvalConfig, RubricConfig


class EvalGroup(TyperGroup):
    """`eval` is a command and a group (`eval compare`, `eval judge`): a group cannot take
    positional arguments of its own, so `key=value` arguments of a plain `eval` are read as
    `--set key=value` before click parses the line."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            return super().parse_args(ctx, args)
        takes_value = {
            name
            for param in self.get_params(ctx)
            if param.param_type_name == "option" and not getattr(param, "is_flag", False)
            for name in param.opts
        }
        rewritten: list[str] = []
        value_next = False
        for arg in args:
            as_setting = not value_next and KEY.match(arg) is not None
            rewritten += ["--set", arg] if as_setting else [arg]
            value_next = arg in takes_value and not value_next
        return super().parse_args(ctx, rewritten)


app = typer.Typer(
    cls=EvalGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    subcommand_metavar="[KEY=VALUE]... | compare A B | judge A B",
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


@app.callback()
def evaluate(
    ctx: typer.Context,
    method: Annotated[str | None, typer.Option(help=METHOD_HELP)] = None,
    data: Annotated[list[str] | None, typer.Option(help=DATA_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="Evaluation folder (resumable).")] = None,
    index: IndexOption = None,
    url: UrlOption = None,
    model: ModelOption = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="First N questions of each set (default: all).")
    ] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Questions per batch.")] = None,
    seed: SeedOption = None,
    config_name: ConfigOption = None,
    run_settings: RunSettingsOption = True,
    overrides: SetOption = None,
) -> None:
    """Score a method the way the papers' Table 2 does: EM/F1/SubEM, searches, turns, tokens
    and latency per question, aggregates with 95% bootstrap intervals. Rerunning the same
    command completes an interrupted run or skips a finished one. Settings as `key=value`
    arguments (e.g. rollout.max_turns=2; `searchrl config show eval` lists them); a trained
    run's model is evaluated with that run's rollout settings unless --no-run-settings."""
    if ctx.invoked_subcommand is not None:
        return
    if method is None or not data or out is None:
        raise typer.BadParameter("--method, --data and --out are required")
    from searchrl.eval.harness import evaluate, retriever_identity
    from searchrl.eval.registry import method as lookup
    from searchrl.eval.sets import load_sets

    model = resolve_model(model)
    adopted = run_rollout(model) if run_settings else None
    values = {"method": method, "limit": limit, "batch_size": batch_size, "seed": seed,
              "model.name_or_path": model}  # fmt: skip
    base = {"rollout": adopted[1]} if adopted is not None else None
    config: EvalConfig = settings(EvalConfig, config_name, overrides or [], values, base)
    if adopted is not None:
        typer.echo(describe_adopted(*adopted, EvalConfig().rollout), err=True)
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
    console = wide_console()
    console.print(table)
    if summary.get("failures"):
        console.print(failure_rich_table(summary["failures"]))
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


FAILURE_COLUMNS = (
    ("right", "right"),
    ("shown_wrong", "shown, wrong"),
    ("never_shown", "never shown"),
    ("no_answer", "no answer"),
    ("comparison", "comparison, wrong"),
)
"""The failure table's columns (`eval.evidence` says what each cause means)."""


def failure_rich_table(failures: dict[str, dict[str, int]]) -> Table:
    """Why questions were lost, per set: wrong answers whose gold was shown, never shown,
    no answer, comparison questions answered wrong (and how many comparisons there were)."""
    table = Table(title="Where the questions went (gold shown = in the passages the policy read)")
    for column in ("set", "n", *(label for _, label in FAILURE_COLUMNS), "comparisons",
                   "gold shown"):  # fmt: skip
        table.add_column(column, justify="left" if column == "set" else "right")
    for name, counts in failures.items():
        cells = [str(counts.get(key, 0)) for key, _ in FAILURE_COLUMNS]
        comparisons = f"{counts.get('comparisons_right', 0)} / {counts.get('comparisons', 0)} right"
        table.add_row(name, str(counts["n"]), *cells, comparisons, str(counts.get("gold_shown", 0)))
    if any(counts.get("unknown") for counts in failures.values()):
        table.caption = "rows written before evaluations kept gold_shown count in neither column"
    return table


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
    wide_console().print(table)
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
    judge_model: Annotated[
        str | None, typer.Option("--judge-model", help="Model name the endpoint serves.")
    ] = None,
    per_set: Annotated[
        int | None, typer.Option(min=0, help="Pairs sampled per set (0 = every pair).")
    ] = None,
    seed: SeedOption = None,
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON.")] = None,
    force: ForceOption = False,
    config_name: ConfigOption = None,
    sets: SetOption = None,
    overrides: OverridesArgument = None,
) -> None:
    """Trajectory quality (Search-R2 §5.6): six rubric dimensions scored 0/1/2 for each
    trajectory of a pair, each on its own (`shown=pair` shows both, order randomised);
    wins, losses and ties of A per dimension."""
    from searchrl.eval.compare import write_json
    from searchrl.eval.rubric import DIMENSIONS, judge_runs
    from searchrl.utils.output import check_output

    if out is not None:
        check_output(out, force=force)

    values = {"kind": kind, "url": url, "model": judge_model, "per_set": per_set, "seed": seed}
    config: RubricConfig = settings(RubricConfig, config_name, joined(sets, overrides), values)
    result = judge_runs(first, second, config)
    table = Table(title=f"trajectory quality: A = {first}  vs  B = {second} ({config.kind})")
    for column in ("dimension", "A wins", "B wins", "ties", "not scored"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for dim in DIMENSIONS:
        c = result["overall"][dim]
        table.add_row(dim, str(c["wins"]), str(c["losses"]), str(c["ties"]), str(c["unscored"]))
    wide_console().print(table)
    typer.echo(f"{result['pairs']} pairs")
    if out is not None:
        write_json(result, out, force=force)


def register(root: typer.Typer) -> None:
    """Attach `eval` and its subcommands to the top-level app."""
    root.add_typer(app, name="eval")
