"""How well the `rule` and `local` process judges agree with the world's `oracle` on u_i.

    python benchmarks/search_r2/judge_agreement.py --questions 120 --local-limit 24 \
        --local-max-tokens 96

A world is generated (its questions know which passages state each hop) and indexed with BM25.
Each question gets search sequences like a policy's: the scripted solver's queries (the
reference), the same with one query repeated (redundant), with one query replaced by another
entity's (irrelevant), and with the queries in reverse order. Every sequence is retrieved for
real (top-3) and judged by the oracle, the rule and, on the first `--local-limit` sequences,
the paper's judge prompt on the embedded 135M model (greedy). The table gives precision and
recall of u_i = 1 against the oracle, accuracy, and the share of judgments without a verdict.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

from searchrl.config.data import WorldConfig
from searchrl.config.model import ModelConfig
from searchrl.data.templates import format_information
from searchrl.data.world import generate_world, solve
from searchrl.data.world.schema import query_of_mention, relation
from searchrl.models.loading import load_policy
from searchrl.retrieval.bm25 import BM25Retriever
from searchrl.reward.judges import Collection, JudgeRequest, Judgment, LocalJudge
from searchrl.reward.judges.symbolic import OracleJudge, RuleJudge, needed_entities, world_support
from searchrl.types import Question
from searchrl.utils.progress import progress_bar


def query_sequences(q: Question, reference_queries: list[str], rng: random.Random, other: str):  # type: ignore[no-untyped-def]
    """(variant name, queries) for one question."""
    out = [("reference", reference_queries)]
    out.append(("repeated", [*reference_queries, reference_queries[-1]]))
    swapped = list(reference_queries)
    keyword = relation(q.metadata["relations"][0]).keyword
    swapped[rng.randrange(len(swapped))] = query_of_mention(other, keyword)
    out.append(("irrelevant", swapped))
    if len(reference_queries) > 1:
        out.append(("reversed", reference_queries[::-1]))
    return out


def requests_for(
    questions: Sequence[Question], retriever: BM25Retriever, seed: int
) -> list[tuple[str, JudgeRequest]]:
    rng = random.Random(seed)
    refs = solve(questions, retriever, 3)
    mentions = [q.metadata["start"] for q in questions]
    out = []
    for q, ref in zip(questions, refs, strict=True):
        queries = [
            s["text"].split("<search>")[1].split("</search>")[0].strip()
            for s in ref.segments
            if "<search>" in s["text"]
        ]
        for name, sequence in query_sequences(q, queries, rng, rng.choice(mentions)):
            hits = retriever.search(sequence, 3)
            collections = tuple(
                Collection(
                    tuple(h.document.id for h in row),
                    format_information([h.document.contents for h in row]).strip(),
                )
                for row in hits
            )
            request = JudgeRequest(
                q.question,
                q.golden_answers,
                collections,
                world_support(q.metadata),
                needed_entities(q.metadata),
            )
            out.append((name, request))
    return out


def agreement(truth: list[Judgment], judged: list[Judgment]) -> dict[str, float]:
    """Precision/recall of u_i = 1 against the oracle over collections with a verdict."""
    tp = fp = fn = tn = 0
    missing = 0
    for t, j in zip(truth, judged, strict=True):
        if j.useful is None:
            missing += 1
            continue
        for a, b in zip(t.useful or (), j.useful, strict=True):
            tp += a and b
            fp += (not a) and b
            fn += a and not b
            tn += (not a) and not b
    total = tp + fp + fn + tn
    return {
        "requests": float(len(judged)),
        "no_verdict": missing / max(len(judged), 1),
        "collections": float(total),
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "accuracy": (tp + tn) / total if total else float("nan"),
        "count_exact": sum(
            t.count == j.count for t, j in zip(truth, judged, strict=True) if j.count is not None
        )
        / max(sum(j.count is not None for j in judged), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local-limit", type=int, default=24)
    parser.add_argument("--local-max-tokens", type=int, default=96)
    parser.add_argument("--local-batch", type=int, default=8)
    args = parser.parse_args()

    world = generate_world(WorldConfig(seed=args.seed))
    retriever = BM25Retriever.build(world.documents)
    questions = world.questions["test"][: args.questions]
    labelled = requests_for(questions, retriever, args.seed)
    requests = [r for _, r in labelled]
    oracle = OracleJudge().judge(requests)
    started = time.perf_counter()
    rule = RuleJudge().judge(requests)
    rule_s = time.perf_counter() - started

    policy = load_policy(ModelConfig(), max_model_len=8192)
    local = LocalJudge(policy.backend, policy.tokenizer, args.local_max_tokens)
    subset = requests[: args.local_limit]
    local_out: list[Judgment] = []
    started = time.perf_counter()
    with progress_bar("local judge (135M)", len(subset), unit="requests") as advance:
        for i in range(0, len(subset), args.local_batch):
            chunk = subset[i : i + args.local_batch]
            local_out += local.judge(chunk)
            advance(len(chunk))
    local_s = time.perf_counter() - started

    useful = sum(sum(j.useful or ()) for j in oracle)
    total = sum(len(r.collections) for r in requests)
    print(
        f"world seed {args.seed}: {len(questions)} test questions, {len(requests)} search "
        f"sequences, {total} collections, oracle-useful {useful} ({useful / total:.0%})"
    )
    by_variant: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(labelled):
        by_variant.setdefault(name, []).append(i)
    print("\n| judge | sequences | collections | precision | recall | accuracy | count exact "
          "| no verdict | seconds/sequence |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [
        ("rule", requests, rule, rule_s),
        ("local (embedded 135M)", subset, local_out, local_s),
    ]
    for name, reqs, judged, seconds in rows:
        a = agreement(oracle[: len(judged)], judged)
        print(
            f"| {name} | {len(reqs)} | {a['collections']:.0f} | {a['precision']:.3f} | "
            f"{a['recall']:.3f} | {a['accuracy']:.3f} | {a['count_exact']:.3f} | "
            f"{a['no_verdict']:.0%} | {seconds / max(len(reqs), 1):.4f} |"
        )
    print("\nrule by sequence kind:\n\n| kind | collections | precision | recall | accuracy |")
    print("|---|---|---|---|---|")
    for name, idx in by_variant.items():
        a = agreement([oracle[i] for i in idx], [rule[i] for i in idx])
        print(
            f"| {name} | {a['collections']:.0f} | {a['precision']:.3f} | {a['recall']:.3f} | "
            f"{a['accuracy']:.3f} |"
        )
    counts = [j.count for j in local_out]
    print(f"\nlocal judge counts: {counts}")
    sample = next((j.error for j in local_out if j.error), "")
    print(f"example malformed: {sample[:200]}")


if __name__ == "__main__":
    main()
