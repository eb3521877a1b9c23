"""What `benchmarks/eval/real_qa.py` measures besides its runs, and what it prints and keeps: the
answer recall of the retrieved passages (`python benchmarks/eval/real_qa_report.py recall --out
OUT`), the Markdown table, and the archive.

Recall is the ceiling of every method that reads the question's top-k passages: the share of
questions with a gold answer (normalized, whole words) in them, whole and as the policy is
shown them (the `<information>` block cut to `rollout.max_obs_tokens` tokens, as the rollout
cuts it). A searching policy can exceed it only by searching again with a better query.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search_r2"))  # its archive helpers
from search_r2_archive import _commit, _copy, _versions, fingerprint, slim_row

SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
LABELS = ("NQ", "TriviaQA", "PopQA", "HotpotQA", "2wiki", "Musique", "Bamboogle")
OBS_TOKENS = 500
"""The policy's observation budget in the presets and the evaluation (`rollout.max_obs_tokens`),
chosen by `benchmarks/eval/obs_budget.py`: top-3 passages nearly whole."""


def measure_recall(qa: Path, limit: int, indexes: dict[str, Path], topk: int = 3) -> dict:
    """Per engine and set: the share of questions whose top-k passages hold a gold answer,
    whole (`full`) and as shown under the observation budget (`shown`)."""
    from searchrl.config.model import ModelConfig
    from searchrl.data.grounded import answer_recall
    from searchrl.data.templates import format_information
    from searchrl.eval.sets import load_sets
    from searchrl.models.loading import load_tokenizer
    from searchrl.retrieval.index import load_index
    from searchrl.reward.metrics import normalize_answer
    from searchrl.train.sft import observation_view
    from searchrl.utils.progress import progress_bar

    questions = load_sets([str(qa)], limit)
    view = observation_view(load_tokenizer(ModelConfig()), OBS_TOKENS)
    result: dict[str, Any] = {"topk": topk, "obs_tokens": OBS_TOKENS, "engines": {}}
    for name, directory in indexes.items():
        retriever = load_index(directory)
        started = time.perf_counter()
        found: dict[str, dict[str, list[bool]]] = defaultdict(lambda: {"full": [], "shown": []})
        with progress_bar(f"recall ({name})", len(questions), unit="questions") as advance:
            for start in range(0, len(questions), 64):
                chunk = questions[start : start + 64]
                results = retriever.search([q.question for q in chunk], topk)
                for q, hits in zip(chunk, results, strict=True):
                    shown = normalize_answer(
                        view(format_information([h.document.contents for h in hits]))
                    )
                    golds = [normalize_answer(g) for g in q.golden_answers if normalize_answer(g)]
                    found[q.source]["full"].append(answer_recall(hits, q.golden_answers))
                    found[q.source]["shown"].append(any(f" {g} " in f" {shown} " for g in golds))
                advance(len(chunk))
        per_set = {s: {k: sum(v) / len(v) for k, v in found[s].items()} for s in found}
        result["engines"][name] = {"by_set": per_set, "search_s": time.perf_counter() - started}
    return result


def recall_table(recall: dict) -> str:
    """Recall per engine (rows: full / shown), the seven sets and their unweighted mean."""
    header = ["engine", "passages", *LABELS, "Avg."]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, block in recall["engines"].items():
        for kind, words in (("full", "whole"), ("shown", f"first {recall['obs_tokens']} tokens")):
            values = [block["by_set"].get(s, {}).get(kind) for s in SETS]
            known = [v for v in values if v is not None]
            cells = [f"{v:.2f}" if v is not None else "–" for v in values]
            avg = f"{sum(known) / len(known):.3f}" if known else "–"
            lines.append(
                f"| {name} | top-{recall['topk']}, {words} | " + " | ".join(cells) + f" | {avg} |"
            )
    return (
        "Answer recall of the question's passages (the ceiling of reading them):\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _estimate(block: dict | None) -> str:
    if not block or block.get("mean") is None:
        return "–"
    return f"{block['mean']:.3f} [{block['low']:.2f}, {block['high']:.2f}]"


def grid(out: Path, cells: Sequence[str], folder: str = "evals") -> str:
    """One row per evaluated cell (in OUT/`folder`): EM per set with its 95% interval, Avg.,
    searches, n."""
    header = ["cell", "method", *LABELS, "Avg.", "general", "multi-hop", "SubEM Avg.",
              "searches / q", "multi-hop searches / q", "n"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in cells:
        path = out / folder / name / "summary.json"
        if not path.is_file():
            continue
        s = json.loads(path.read_text())
        by_set, cat = s.get("by_set", {}), s.get("by_category", {})
        row = [name, s["method"], *(_estimate(by_set.get(k, {}).get("em")) for k in SETS),
               _estimate(s["average"]["em"]), _estimate(cat.get("general", {}).get("em")),
               _estimate(cat.get("multi-hop", {}).get("em")),
               f"{s['average']['subem']['mean']:.3f}",
               f"{s['overall']['searches']['mean']:.2f}",
               f"{cat.get('multi-hop', {}).get('searches', {}).get('mean', 0.0):.2f}",
               str(s["overall"]["n"])]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def comparisons(out: Path, pairs: Sequence[tuple[str, str]]) -> str:
    """A − B on the seven-set Avg. (stratified paired test) and on NQ, from OUT/compare."""
    header = ["A vs B", "A Avg.", "B Avg.", "A − B Avg. [95%]", "won / lost", "p", "A − B NQ [95%]"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for first, second in pairs:
        path = out / "compare" / f"{first}_vs_{second}.json"
        if not path.is_file():
            continue
        rows = json.loads(path.read_text())["rows"]
        avg, nq = rows.get("average") or rows["overall"], rows.get("nq")
        nq_text = f"{nq['diff']:+.3f} [{nq['low']:+.3f}, {nq['high']:+.3f}]" if nq else "–"
        lines.append(
            f"| {first} vs {second} | {avg['mean_a']:.3f} | {avg['mean_b']:.3f} | "
            f"{avg['diff']:+.3f} [{avg['low']:+.3f}, {avg['high']:+.3f}] | "
            f"{avg['wins']} / {avg['losses']} | {avg['p_value']:.2g} | {nq_text} |"
        )
    return "\n".join(lines) + "\n"


def failures(out: Path, cells: Sequence[str]) -> str:
    """Where each cell's questions went (`searchrl.eval.evidence`): right, wrong with the gold
    shown, never shown, unanswered, comparisons, over all sets."""
    header = ["cell", "n", "right", "shown, wrong", "never shown", "no answer",
              "comparison, wrong", "comparisons right", "gold shown"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in cells:
        path = out / "evals" / name / "summary.json"
        table = json.loads(path.read_text()).get("failures") if path.is_file() else None
        if not table:
            continue
        c = table["all"]
        lines.append(
            f"| {name} | {c['n']} | {c['right']} | {c['shown_wrong']} | {c['never_shown']} | "
            f"{c['no_answer']} | {c['comparison']} | {c['comparisons_right']} / "
            f"{c['comparisons']} | {c['gold_shown']} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def references(out: Path) -> str:
    """How many training questions the warm start's grounded references cover."""
    path = out / "train" / "sft" / "references_train.jsonl"
    if not path.is_file():
        return ""
    rows = [json.loads(line) for line in path.open()]
    counts = Counter((r["id"].split(":", 1)[0], r["hops"]) for r in rows)
    parts = [f"{source} {hops} search{'es' if hops > 1 else ''}: {n}"
             for (source, hops), n in sorted(counts.items())]  # fmt: skip
    return f"Grounded references: {len(rows)} ({'; '.join(parts)}).\n"


def times_table(out: Path) -> str:
    path = out / "times.json"
    if not path.is_file():
        return ""
    rows = json.loads(path.read_text())
    lines = ["| stage | wall | CPU |", "|---|---:|---:|"]
    for stage, t in rows.items():
        lines.append(f"| {stage} | {t['wall_s'] / 60:.1f} min | {t['cpu_s'] / 60:.1f} min |")
    return "Stage times (wall clock and CPU, this machine):\n\n" + "\n".join(lines) + "\n"


FAILURES_TITLE = "\nWhere the questions went (wrong answers by cause, `searchrl.eval.evidence`):\n"


def _titled(title: str, body: str) -> str:
    return title + "\n" + body if body else ""


def table_markdown(out: Path, cells: Sequence[str], pairs: Sequence[tuple[str, str]]) -> str:
    """Everything OUT holds, as Markdown."""
    parts = ["EM on the first rows of each of the seven sets, 95% intervals:\n", grid(out, cells),
             "\nPaired, on the same questions (`searchrl eval compare A B`):\n",
             comparisons(out, pairs), _titled(FAILURES_TITLE, failures(out, cells)),
             "\n" + references(out), "\n" + times_table(out)]  # fmt: skip
    return "\n".join(p for p in parts if p.strip()) + "\n"


EVIDENCE = ("prediction", "queries", "stop_reason", "shown", "gold_shown")
"""Per-question fields an archived row keeps besides its scores: what a reader needs to check
a failure (`searchrl.eval.evidence`) without the trajectory."""


def evidence_row(row: dict[str, Any]) -> dict[str, Any]:
    """An archived row: id, set, every score and flag, and the evidence fields."""
    return {**slim_row(row), **{k: row[k] for k in EVIDENCE if k in row}}


def _evidence_samples(src: Path, dst: Path) -> list[Path]:
    rows = src / "samples.jsonl"
    if not rows.is_file():
        return []
    dst.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(evidence_row(json.loads(x)), ensure_ascii=False)
             for x in rows.read_text().splitlines() if x.strip()]  # fmt: skip
    (dst / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    return [dst / "samples.jsonl", *_copy(src / "summary.json", dst / "summary.json")]


def archive(out: Path, dest: Path, cells: Sequence[str]) -> list[Path]:
    """Per-question scores and summaries of every evaluation, the training runs' metrics and
    configs, recall, comparisons, times, the table, and a manifest (CPU, versions, commit,
    the warm start's weight digest)."""
    from searchrl.models.precision import cpu_summary

    if dest.resolve() == out.resolve():
        raise ValueError(f"the archive must not be the campaign itself: {dest}")
    written: list[Path] = []
    for name in cells:
        for folder in ("evals", "check"):
            written += _evidence_samples(out / folder / name, dest / folder / name)
            written += _copy(out / folder / name / "run.json", dest / folder / name / "run.json")
    for run in sorted((out / "train").glob("*")):
        for file in ("metrics.jsonl", "config.yaml", "summary.json"):
            written += _copy(run / file, dest / "train" / run.name / file)
    for file in ("recall.json", "times.json", "table.md"):
        written += _copy(out / file, dest / file)
    for path in sorted((out / "compare").glob("*.json")):
        written += _copy(path, dest / "compare" / path.name)
    manifest = {
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "campaign": str(out),
        "warm_start_sha256": fingerprint(out / "train" / "sft" / "model"),
        "cpu": cpu_summary(),
        "versions": _versions(),
        "commit": _commit(),
    }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return [*written, dest / "MANIFEST.json"]


def main() -> None:
    parser = argparse.ArgumentParser(description="Answer recall of the retrieved passages.")
    parser.add_argument("command", choices=["recall"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--qa", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    indexes = {k: args.out / "index" / k for k in ("bm25", "dense")}
    found = {k: v for k, v in indexes.items() if (v / "manifest.json").is_file()}
    result = measure_recall(args.qa, args.limit, found)
    (args.out / "recall.json").write_text(json.dumps(result, indent=2) + "\n")
    print(recall_table(result))


if __name__ == "__main__":
    main()
