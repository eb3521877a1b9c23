"""Every command, fed bad input, ends with a non-zero exit code and exactly one `error:` line
that names the problem: never a traceback, and never a change to outputs that already exist
(a failed rebuild over a working index leaves it working)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.eval import EvalConfig
from searchrl.config.model import ModelConfig
from searchrl.eval.harness import _run_record, retriever_identity
from searchrl.retrieval.index import build_index, load_index

REPO = Path(__file__).resolve().parents[2]
QA = {"id": "1", "question": "Who founded Mifour Studios?", "golden_answers": ["Ada"]}
CORPUS = [
    {"id": "d1", "contents": '"Mifour Studios"\nMifour Studios was founded by Ada Lovelace.'},
    {"id": "d2", "contents": '"Ada Lovelace"\nAda Lovelace was a mathematician.'},
    {"id": "d3", "contents": '"Tea"\nTea is a drink brewed from leaves.'},
]


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace of good and bad inputs and existing outputs the commands must not touch."""
    w = tmp_path_factory.mktemp("ws")
    _jsonl(w / "qa.jsonl", [QA])
    _jsonl(w / "noans.jsonl", [{"id": "1", "question": "Why?"}])
    _jsonl(w / "hops_bad.jsonl", [{**QA, "hops": "two"}])
    (w / "garbage.jsonl").write_text('{"id": "1", "question": \n')
    (w / "qa.txt").write_text("Who?\n")
    _jsonl(w / "corpus.jsonl", CORPUS)
    (w / "bad_corpus.jsonl").write_text(json.dumps(CORPUS[0]) + "\n{oops\n")
    (w / "empty.jsonl").write_text("")
    (w / "bad.yaml").write_text("steps: [1\n")
    (w / "list.yaml").write_text("- a\n- b\n")
    (w / "exists.jsonl").write_text("precious\n")
    (w / "exists.parquet").write_bytes(b"precious")
    (w / "afile").write_text("a file, not a directory\n")
    for run in ("run", "world"):
        (w / run).mkdir()
        (w / run / "keep.txt").write_text("earlier results\n")
    (w / "broken_index").mkdir()
    (w / "broken_index" / "manifest.json").write_text("{not json")
    build_index("bm25", w / "corpus.jsonl", w / "index")
    _jsonl(w / "corpus2.jsonl", CORPUS[:2])
    build_index("bm25", w / "corpus2.jsonl", w / "index2")
    _eval_folder(w / "evalrun", retriever_identity(w / "index2", None))
    return w


def _eval_folder(folder: Path, retriever: dict) -> None:
    """An evaluation folder as `searchrl eval --method rag --index index2` leaves it, on the
    HF engine the in-process CLI resolves `auto` to (module fixtures run before the autouse
    patch that keeps vLLM out, so `auto` here would name vLLM where it is installed)."""
    folder.mkdir()
    config = EvalConfig(method="rag", model=ModelConfig(backend="hf"))
    record = {**_run_record(config, retriever), "loaded_engine": "HFBackend"}
    (folder / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    row = {"id": "qa:1", "set": "qa", "question": QA["question"], "em": 1.0, "f1": 1.0,
           "subem": 1.0, "prediction": "Ada", "golden_answers": ["Ada"], "documents": {},
           "trajectory": {"segments": [], "searches": []}}  # fmt: skip
    (folder / "samples.jsonl").write_text(json.dumps(row) + "\n")


# (argv with {w} for the workspace, expected exit code, text the error line must contain)
TRAIN = "train --config tiny_cpu_grpo --out {w}/new"
SFT = "sft --config tiny_cpu_sft --out {w}/new"
ROLL = "rollout --data {w}/qa.jsonl --out {w}/t.jsonl"
BM25 = "index --kind bm25 --corpus {w}/corpus.jsonl"
EVAL = "eval --method rag --data {w}/qa.jsonl"
CASES = [
    # train / sft / demo: overrides, presets, config files, paths, run folders
    (TRAIN + " foo.bar=1", 2, "unknown config key(s) foo"),
    (TRAIN + " algo.kl_coef=abc", 2, "algo.kl_coef: expected a number"),
    (TRAIN + " rollout.topk=-1", 2, "rollout.topk: must be at least 1"),
    (TRAIN + " steps=0", 2, "steps: must be at least 1"),
    (TRAIN + " optim.warmup_ratio=1.5", 2, "optim.warmup_ratio: must be at most 1"),
    (TRAIN + " algo.advantage=ppo", 2, "algo.advantage: 'ppo' is not one of"),
    (TRAIN + " --resume ...", 2, "override '...' is not of the form key=value"),
    (TRAIN + " steps=[1", 2, "steps: cannot parse"),
    ("train --config nope --out {w}/new", 2, "no config file or preset named 'nope'"),
    ("train --config {w}/bad.yaml --out {w}/new", 1, "not valid YAML"),
    ("train --config {w}/list.yaml --out {w}/new", 1, "the top level must be a mapping"),
    ("train --config tiny_cpu_grpo --out {w}/run", 1, "is not empty; pass --force"),
    ("train --config tiny_cpu_grpo --out {w}/afile", 1, "exists and is a file"),
    (TRAIN + " policy.init_checkpoint={w}/missing", 1, "policy.init_checkpoint not found"),
    (TRAIN + " data.world_dir={w}/qa.jsonl", 1, "data.world_dir must be a directory"),
    ("train --out {w}/new", 2, "Missing option '--config'"),
    (SFT + " lr=-1", 2, "lr: must be greater than 0"),
    ("sft --config tiny_cpu_sft --out {w}/run", 1, "pass --force"),
    (SFT + " model.device=gpu", 2, "model.device: must be a torch device"),
    ("demo --out {w}/new rl.nope=1", 2, "unknown config key(s) rl.nope"),
    ("demo --out {w}/new sft.epochs=0", 2, "sft.epochs: must be greater than 0"),
    ("demo --out {w}/new --config {w}/list.yaml", 1, "the top level must be a mapping"),
    ("demo --out {w}/new world.hop_weights=[0,0,0,0]", 2, "world.hop_weights: at least one weight"),
    # rollout / chat: files, search engine, options, outputs — all before a model loads
    (
        "rollout --data /nonexistent.jsonl --out {w}/t.jsonl --index {w}/index",
        1,
        "question file not found",
    ),
    (
        "rollout --data {w}/noans.jsonl --out {w}/t.jsonl --index {w}/index",
        1,
        "'golden_answers' must be a non-empty list",
    ),
    (
        "rollout --data {w}/garbage.jsonl --out {w}/t.jsonl --index {w}/index",
        1,
        "row 1: invalid JSON",
    ),
    ("rollout --data {w}/qa.txt --out {w}/t.jsonl --index {w}/index", 1, "unknown format"),
    ("rollout --data {w}/empty.jsonl --out {w}/t.jsonl --index {w}/index", 1, "no questions"),
    (ROLL, 2, "exactly one of --index DIR or --url URL"),
    (ROLL + " --index {w}/index --url http://x", 2, "exactly one of"),
    (ROLL + " --index {w}/nope", 1, "not an index directory"),
    (ROLL + " --index {w}/broken_index", 1, "unreadable manifest"),
    (ROLL + " --url http://127.0.0.1:9/retrieve", 1, "failed after 2 attempt(s)"),
    (ROLL + " --index {w}/index rollout.topk=abc", 2, "rollout.topk: expected an integer"),
    (ROLL + " --index {w}/index rollout.top_p=0", 2, "rollout.top_p: must be greater than 0"),
    (ROLL + " --index {w}/index topk=3", 2, "topk; did you mean rollout.topk?"),
    (ROLL + " --index {w}/index --n 0", 2, "'--n'"),
    (ROLL + " --index {w}/index --limit -1", 2, "'--limit'"),
    (ROLL + " --index {w}/index --temperature -1", 2, "'--temperature'"),
    (
        "rollout --data {w}/qa.jsonl --out {w}/exists.jsonl --index {w}/index",
        1,
        "already exists; pass --force",
    ),
    (
        "rollout --data {w}/qa.jsonl --out {w}/afile/t.jsonl --index {w}/index",
        1,
        "is not a directory",
    ),
    (
        "rollout --data {w}/qa.jsonl --out {w}/run --index {w}/index",
        1,
        "is a directory; give a file name",
    ),
    ("chat --index /nonexistent", 1, "not an index directory"),
    ("chat", 2, "exactly one of --index DIR or --url URL"),
    ("chat --index {w}/index rollout.max_turns=-1", 2, "rollout.max_turns: must be at least 0"),
    ("chat --index {w}/index model.generation_batch_size=0", 2, "model.generation_batch_size"),
    # world
    ("world --preset nope --out {w}/w1", 2, "unknown world preset 'nope'"),
    ("world --out {w}/w1 same_name_rate=2", 2, "same_name_rate: must be at most 1"),
    (
        "world --out {w}/w1 hop_weights=[0,0,0,0]",
        2,
        "hop_weights: at least one weight must be positive",
    ),
    ("world --out {w}/w1 hop_weights=[1,1]", 2, "hop_weights: expected 4 values"),
    ("world --out {w}/w1 num_entities=-5", 2, "num_entities: must be at least 10"),
    ("world --out {w}/w1 train_questions=1500 num_entities=10", 1, "cannot generate this world"),
    ("world --out {w}/w1 seed=abc", 2, "seed: expected an integer"),
    ("world --out {w}/w1 colour=blue", 2, "unknown config key(s) colour"),
    ("world --out {w}/w1 nokey", 2, "is not of the form key=value"),
    ("world --out {w}/exists.jsonl --preset test", 1, "exists and is a file"),
    ("world --out {w}/world --preset test", 1, "is not empty; pass --force"),
    # index: bad settings, bad corpora, unwritable targets, failed rebuilds over a working index
    (
        BM25 + " --out {w}/i1 --set bm25.stemmer=klingon",
        2,
        "bm25.stemmer: must be a PyStemmer language",
    ),
    (BM25 + " --out {w}/i1 bm25.k1=-5", 2, "bm25.k1: must be at least 0"),
    (BM25 + " --out {w}/i1 --set bm25.method=okapi", 2, "bm25.method"),
    (BM25 + " --out {w}/i1 --config {w}/bad.yaml", 1, "not valid YAML: expected"),
    (BM25 + " --out {w}/i1 --config {w}/missing.yaml", 1, "config file not found"),
    ("index --kind splade --corpus {w}/corpus.jsonl --out {w}/i1", 2, "--kind must be one of"),
    ("index --kind bm25 --corpus {w}/missing.jsonl --out {w}/i1", 1, "corpus file not found"),
    ("index --kind bm25 --corpus {w}/empty.jsonl --out {w}/i1", 1, "the corpus is empty"),
    (BM25 + " --out {w}/exists.jsonl", 1, "exists and is a file"),
    (BM25 + " --out {w}/afile/idx", 1, "is not a directory"),
    (BM25 + " --out /proc/searchrl-nope/idx", 1, "cannot"),
    (BM25 + " --out {w}/index", 1, "is not empty; pass --force"),
    (
        "index --kind bm25 --corpus {w}/bad_corpus.jsonl --out {w}/index --force",
        1,
        "bad_corpus.jsonl:2: malformed JSON",
    ),
    (
        "index --kind dense --corpus {w}/corpus.jsonl --out {w}/index --force"
        " --set dense.encoder={w}/no-encoder --set dense.local_files_only=true",
        1,
        "could not load encoder",
    ),
    # search / serve
    ("search --index {w}/qa.jsonl tea", 1, "not an index directory"),
    ("search --index {w}/broken_index tea", 1, "unreadable manifest"),
    ("search --index {w}/index -k 0 tea", 2, "'-k' / '--topk'"),
    ("search --index {w}/index --url http://x tea", 2, "exactly one of"),
    ("search --index {w}/index dense.index_type=graph tea", 2, "dense.index_type"),
    ("search --url ftp://x tea", 1, "remote.url: must be an http(s):// URL"),
    (ROLL + " --url localhost:8000", 1, "remote.url: must be an http(s)://"),
    ("serve --index {w}/nope", 1, "not an index directory"),
    ("serve --index {w}/index --port 70000", 2, "'--port'"),
    ("serve --index {w}/index server.max_topk=0", 2, "server.max_topk: must be at least 1"),
    (
        "serve --index {w}/index --set server.default_topk=200",
        2,
        "server.default_topk: 200 is above max_topk (100)",
    ),
    ("serve --index {w}/index --set server.port=70000", 2, "server.port: must be at most 65535"),
    (
        "serve --faiss-index {w}/missing.index --corpus {w}/corpus.jsonl --encoder x",
        1,
        "faiss index file not found",
    ),
    (
        "serve --faiss-index {w}/afile --corpus {w}/missing.jsonl --encoder x",
        1,
        "corpus file not found",
    ),
    ("serve --faiss-index {w}/afile", 2, "all of --faiss-index, --corpus, --encoder"),
    (
        "serve --index {w}/index --faiss-index {w}/afile --corpus {w}/corpus.jsonl --encoder x",
        2,
        "give --index DIR, or",
    ),
    ("serve", 2, "give --index DIR, or all of"),
    # eval / compare / judge: refused before a model loads, existing outputs untouched
    (
        EVAL + " --index {w}/index --out {w}/evalrun",
        1,
        "holds an evaluation with other settings (retriever): retriever: bm25 index",
    ),
    (EVAL + " --index {w}/index2 --out {w}/evalrun --set rollout.topk=5", 1, "(rollout)"),
    (EVAL + " --out {w}/e1", 2, "rag searches: give exactly one of --index or --url"),
    (EVAL + " --index {w}/nope --out {w}/e1", 1, "not an index directory"),
    (EVAL + " --index {w}/index --out {w}/e1 rollout.topk=0", 2, "rollout.topk: must be"),
    (EVAL + " --index {w}/index --out {w}/e1 --set nope=1", 2, "unknown config key(s) nope"),
    ("eval --method magic --data {w}/qa.jsonl --out {w}/e1", 2, "unknown method 'magic'"),
    (EVAL + " --index {w}/index --out {w}/e1 --limit -3", 2, "'--limit'"),
    (EVAL + " --index {w}/index --out {w}/e1 --batch-size 0", 2, "'--batch-size'"),
    (EVAL + " --index {w}/index --out {w}/e1 rollout.max_turns=[1", 2, "rollout.max_turns: cannot"),
    (EVAL + " --index {w}/index --out {w}/e1 confidence=1.5", 2, "confidence: must be less than 1"),
    (EVAL + " --index {w}/index --out {w}/e1 --config nope", 2, "no config file or preset"),
    (EVAL + " --out {w}/e1 --config tiny_cpu_grpo", 1, "holds settings of `searchrl train`"),
    (TRAIN + " --seed -1", 2, "'--seed'"),
    (TRAIN + " seed=-1", 2, "seed: must be at least 0"),
    (TRAIN + " data.train_batch_size=8", 2, "veRL's data.train_batch_size is batch_size"),
    ("eval judge {w}/evalrun {w}/evalrun --per-set -1", 2, "'--per-set'"),
    ("chat --index {w}/index --refine 500", 2, "'--refine'"),
    (
        "eval --method rag-ft --data {w}/qa.jsonl --index {w}/index --out {w}/e1",
        2,
        "rag-ft evaluates a trained policy: give --model",
    ),
    ("eval --method direct --data {w}/missing.jsonl --out {w}/e1", 1, "no such file or folder"),
    ("eval --method direct --data {w}/garbage.jsonl --out {w}/e1", 1, "row 1: invalid JSON"),
    ("eval --method direct --data {w}/qa.jsonl", 2, "--method, --data and --out are required"),
    (
        "eval compare {w}/evalrun {w}/evalrun --out {w}/exists.jsonl",
        1,
        "already exists; pass --force",
    ),
    ("eval compare {w}/run {w}/evalrun", 1, "is not an evaluation folder"),
    (
        "eval judge {w}/evalrun {w}/evalrun --out {w}/exists.jsonl",
        1,
        "already exists; pass --force",
    ),
    ("eval judge {w}/evalrun {w}/evalrun --kind magic", 2, "kind: 'magic' is not one of"),
    # report
    ("report {w}/evalrun --out {w}/exists.jsonl", 1, "already exists; pass --force to replace it"),
    ("report {w}/missing --out {w}/r.html", 1, "run or evaluation folder not found"),
    ("report {w}/evalrun --out {w}/run", 1, "is a directory; give a file name"),
    ("report {w}/evalrun --out {w}/r.html --max-trajectories -1", 2, "'--max-trajectories'"),
    # data
    ("data stats {w}/missing.jsonl", 1, "QA file not found"),
    ("data stats {w}/qa.jsonl --corpus /nonexistent", 1, "corpus file not found"),
    ("data stats {w}/hops_bad.jsonl", 1, "'hops' must be a whole number, got 'two'"),
    ("data stats {w}/qa.jsonl --corpus {w}/bad_corpus.jsonl", 1, "row 2: not a corpus row"),
    ("data convert {w}/qa.jsonl {w}/out.csv", 1, "expected .jsonl ↔ .parquet"),
    ("data convert {w}/missing.jsonl {w}/x.parquet", 1, "input file not found"),
    ("data convert {w}/qa.jsonl {w}/exists.parquet", 1, "already exists; pass --force"),
    ("data convert {w}/qa.jsonl {w}/afile/x.parquet", 1, "is not a directory"),
    ("data nope", 2, "No such command 'nope'"),
    ("nope", 2, "No such command 'nope'"),
    ("--bogus", 2, "No such option"),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(("argv", "code", "message"), CASES, ids=[c[0][:60] for c in CASES])
def test_bad_invocation_is_one_line_and_harmless(
    ws: Path, argv: str, code: int, message: str
) -> None:
    before = snapshot(ws)
    result = CliRunner().invoke(app, [a.format(w=ws) for a in argv.split()])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == code, result.stderr + result.stdout
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert snapshot(ws) == before, "an existing file changed"
    assert not list(ws.rglob(".*.tmp-*")), "a temporary was left behind"


def test_a_failed_rebuild_leaves_the_working_index_usable(ws: Path) -> None:
    argv = f"index --kind bm25 --corpus {ws}/bad_corpus.jsonl --out {ws}/index --force"
    assert CliRunner().invoke(app, argv.split()).exit_code == 1
    hits = load_index(ws / "index").search(["Who founded Mifour Studios?"], 1)
    assert hits[0][0].document.id == "d1"


def test_force_replaces_an_index_in_one_step(ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    corpus = ws / "corpus.jsonl"
    args = ["index", "--kind", "bm25", "--corpus", str(corpus), "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    smaller = _jsonl(tmp_path / "smaller.jsonl", CORPUS[:2])
    args[4] = str(smaller)
    assert CliRunner().invoke(app, [*args, "--force"]).exit_code == 0
    assert len(load_index(out).search(["tea"], 3)[0]) == 0  # "Tea" passage gone
    assert not list(tmp_path.glob(".idx.tmp-*"))


def test_a_bug_is_exit_70_with_one_line_and_a_traceback_only_on_request(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("searchrl.cli.data.file_stats", broken)
    quiet = CliRunner().invoke(app, ["data", "stats", str(ws / "qa.jsonl")])
    assert quiet.exit_code == 70 and "Traceback" not in quiet.stderr
    assert quiet.stderr.strip().splitlines() == [
        "error: internal error (a bug): ZeroDivisionError: division by zero; rerun with "
        "--debug or SEARCHRL_DEBUG=1 for the traceback"
    ]
    loud = CliRunner().invoke(app, ["--debug", "data", "stats", str(ws / "qa.jsonl")])
    assert loud.exit_code == 70 and "Traceback" in loud.stderr
    monkeypatch.setenv("SEARCHRL_DEBUG", "1")
    env = CliRunner().invoke(app, ["data", "stats", str(ws / "qa.jsonl")])
    assert env.exit_code == 70 and "Traceback" in env.stderr


def _searchrl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in a fresh interpreter (what a user's shell runs)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "searchrl", *args],
        capture_output=True, text=True, env=environ, timeout=120, check=False,
    )  # fmt: skip


def test_the_console_entry_point_uses_the_boundary(ws: Path) -> None:
    bad = _searchrl("train", "--config", "tiny_cpu_grpo", "--out", str(ws / "new"), "foo.bar=1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "error: unknown config key(s) foo"
    usage = _searchrl("rollout", "--data", str(ws / "qa.jsonl"), "--out", str(ws / "t.jsonl"))
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1
    debug = _searchrl("search", "--index", str(ws / "nope"), "tea", env={"SEARCHRL_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("error: ")
