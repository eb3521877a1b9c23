"""The resumable harness: every question gets exactly one row, across batches, failures,
kills and reruns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from eval_worker import SlowBackend, answer, questions
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.eval import EvalConfig
from searchrl.config.model import ModelConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.eval.harness import (
    EvalError,
    Resources,
    _run_record,
    engine_identity,
    evaluate,
    retriever_identity,
)
from searchrl.eval.sets import load_sets
from searchrl.eval.store import SampleStore, StoreError
from searchrl.models.loading import Policy
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.index import build_index

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src"


class Counting:
    """Resources that count how often the model is loaded and how many prompts it sees."""

    def __init__(self, tokenizer, retriever=None):
        self.backend = ScriptedBackend(tokenizer, answer)
        self.policy = Policy(self.backend, tokenizer, None)
        self.loads = 0
        self.retriever = retriever

    def resources(self) -> Resources:
        def load() -> Policy:
            self.loads += 1
            return self.policy

        return Resources(open_retriever=lambda: self.retriever, load_policy=load)

    @property
    def prompts(self) -> int:
        return len(self.backend.generated)


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def config(**kw) -> EvalConfig:
    return EvalConfig(**{"method": "direct", "progress": False, "bootstrap_resamples": 200, **kw})


def test_last_partial_batch_is_kept_and_rows_carry_the_record(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer)
    summary = evaluate(config(batch_size=4), questions(10), tmp_path, counting.resources())
    written = rows(tmp_path)
    assert [r["id"] for r in written] == [f"toy:{i}" for i in range(10)]
    assert summary["n"] == 10 and summary["missing"] == 0
    assert summary["overall"]["em"]["mean"] == 1.0
    first = written[0]
    for key in ("id", "set", "prediction", "em", "f1", "subem", "searches", "turns", "tokens",
                "latency", "hops", "trajectory"):  # fmt: skip
        assert key in first
    assert first["prediction"] == "1" and first["trajectory"]["segments"][0]["role"] == "policy"
    assert json.loads((tmp_path / "summary.json").read_text())["n"] == 10


def test_rerun_skips_finished_questions_without_loading_the_model(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer)
    evaluate(config(batch_size=3), questions(4), tmp_path, counting.resources())
    assert counting.loads == 1 and counting.prompts == 4
    again = evaluate(config(batch_size=3), questions(4), tmp_path, counting.resources())
    assert counting.loads == 1 and counting.prompts == 4  # nothing regenerated
    assert len(rows(tmp_path)) == 4 and again["n"] == 4
    more = evaluate(config(batch_size=3), questions(7), tmp_path, counting.resources())
    assert counting.prompts == 7 and len(rows(tmp_path)) == 7 and more["n"] == 7
    fewer = evaluate(config(batch_size=3), questions(2), tmp_path, counting.resources())
    assert fewer["n"] == 2  # the summary covers the questions asked for


def test_a_folder_refuses_another_configuration(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer)
    evaluate(config(), questions(2), tmp_path, counting.resources())
    with pytest.raises(EvalError, match="method"):
        evaluate(config(method="cot"), questions(2), tmp_path, counting.resources())
    other = config(model=ModelConfig(name_or_path="HuggingFaceTB/SmolLM2-360M-Instruct"))
    with pytest.raises(EvalError, match="model"):
        evaluate(other, questions(2), tmp_path, counting.resources())


class FlakyRetriever(DictRetriever):
    def search(self, queries, k):
        self.calls.append(list(queries))
        if len(self.calls) == 2:
            raise RetrievalError("server restarting")
        return [[] for _ in queries]


def test_failed_retrievals_are_retried_by_the_next_run_not_dropped(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer, FlakyRetriever([]))
    cfg = config(method="rag", batch_size=2)
    first = evaluate(cfg, questions(6), tmp_path, counting.resources())
    assert first["missing"] == 2 and first["n"] == 4
    assert [r["id"] for r in rows(tmp_path)] == ["toy:0", "toy:1", "toy:4", "toy:5"]
    second = evaluate(cfg, questions(6), tmp_path, counting.resources())
    assert second["missing"] == 0 and second["n"] == 6
    assert sorted(r["id"] for r in rows(tmp_path)) == sorted(f"toy:{i}" for i in range(6))


def test_store_repairs_a_torn_tail_and_drops_duplicates(tmp_path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_text('{"id": "a", "em": 1}\n{"id": "b", "em": 0}\n{"id": "a", "em": 0}\n{"id": "c"')
    store = SampleStore(path)
    loaded = store.load()
    assert [(r["id"], r["em"]) for r in loaded] == [("a", 1), ("b", 0)]
    store.append([{"id": "c", "em": 1}])
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a", "b", "c"]
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(StoreError, match="line 2"):
        SampleStore(path).load()


def test_a_second_writer_is_refused(tmp_path) -> None:
    first, second = SampleStore(tmp_path / "s.jsonl"), SampleStore(tmp_path / "s.jsonl")
    first.lock()
    script = (
        "import sys; from pathlib import Path; from searchrl.eval.store import SampleStore, "
        "StoreError\ntry:\n    SampleStore(Path(sys.argv[1])).lock()\nexcept StoreError:\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.jsonl")], env=env)
    assert child.returncode == 3
    first.unlock()
    second.lock()
    second.unlock()


@pytest.mark.slow
def test_killed_evaluation_restarts_where_it_stopped(tokenizer, tmp_path) -> None:
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    out = tmp_path / "eval"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE), str(HERE.parent / "rollout")]),
    }
    args = [
        sys.executable,
        str(HERE / "eval_worker.py"),
        str(out),
        str(tokenizer_dir),
        "12",
        "2",
        "0.4",
    ]
    child = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if samples.is_file() and samples.read_text().count("\n") >= 4:
            break
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    before = [r["id"] for r in SampleStore(samples).load()]
    assert 4 <= len(before) < 12
    counting = Counting(tokenizer)
    counting.backend = SlowBackend(tokenizer, 0.0)
    counting.policy = Policy(counting.backend, tokenizer, None)
    resumed = config(batch_size=2, model=ModelConfig(backend="hf"))  # as eval_worker.py's
    summary = evaluate(resumed, questions(12), out, counting.resources())
    after = [r["id"] for r in rows(out)]
    assert after[: len(before)] == before  # finished rows were kept, not redone
    assert sorted(after) == sorted(f"toy:{i}" for i in range(12)) and len(after) == 12
    assert counting.prompts == 12 - len(before)
    assert summary["n"] == 12 and summary["overall"]["em"]["mean"] == 1.0


def test_load_sets_limits_each_set(tmp_path) -> None:
    for name in ("nq", "hotpotqa"):
        lines = [json.dumps({"id": str(i), "question": f"q{i}", "golden_answers": ["a"]})
                 for i in range(5)]  # fmt: skip
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    loaded = load_sets([str(tmp_path)], limit=2)
    assert [q.uid for q in loaded] == ["hotpotqa:0", "hotpotqa:1", "nq:0", "nq:1"]
    with pytest.raises(ValueError, match="twice"):
        load_sets([str(tmp_path / "nq.jsonl"), str(tmp_path / "nq.jsonl")], limit=0)
    rows = load_sets([f"{tmp_path / 'nq.jsonl'}[3:]", str(tmp_path / "hotpotqa.jsonl")], limit=1)
    assert [q.uid for q in rows] == ["nq:3", "hotpotqa:0"]  # a row cut, then the limit


def test_search_r2_runs_record_the_refiner_settings() -> None:
    r2 = EvalConfig(method="search-r2")
    assert "refiner" not in _run_record(EvalConfig(method="search-r1"))
    assert _run_record(r2)["refiner"]["margin"] == 0.0
    sharper = replace(r2, refiner=RefinerConfig(margin=1.0))
    assert _run_record(sharper) != _run_record(r2)  # a folder never mixes two τ


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _index(tmp_path: Path, name: str, rows: int) -> Path:
    corpus = tmp_path / f"{name}.jsonl"
    docs = [
        {"id": f"d{i}", "contents": f'"T{i}"\nPassage {i} about topic {i}.'} for i in range(rows)
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return build_index("bm25", corpus, tmp_path / name)


def test_run_json_records_the_search_engine_and_a_rerun_with_another_is_refused(
    tokenizer, tmp_path
) -> None:
    first, second = _index(tmp_path, "one", 4), _index(tmp_path, "two", 3)
    counting = Counting(tokenizer, DictRetriever([]))
    out = tmp_path / "eval"
    cfg = config(method="rag", batch_size=8)
    resources = replace(counting.resources(), retriever=retriever_identity(first, None))
    evaluate(cfg, questions(3), out, resources)
    run = json.loads((out / "run.json").read_text())
    assert run["retriever"]["index"] == str(first.resolve()) and run["retriever"]["kind"] == "bm25"
    assert (
        run["retriever"]["corpus"]["rows"] == 4 and len(run["retriever"]["corpus"]["sha256"]) == 64
    )
    assert run["engine"]["backend"] in ("hf", "ct2")  # resolved, never "auto"
    assert run["loaded_engine"] == "ScriptedBackend"
    before = snapshot(out)
    for other in (retriever_identity(second, None), retriever_identity(None, "http://x/retrieve")):
        with pytest.raises(EvalError, match=r"\(retriever\).*use another --out"):
            evaluate(cfg, questions(5), out, replace(resources, retriever=other))
        assert snapshot(out) == before  # refused before anything was written
    assert counting.loads == 1
    again = evaluate(cfg, questions(5), out, resources)  # the same engine completes the rest
    assert again["n"] == 5


def test_the_engine_auto_resolves_to_is_recorded_and_must_match(
    tokenizer, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cpu(bf16_measures_fast: bool) -> None:
        monkeypatch.setattr("searchrl.eval.harness.fast_bf16", lambda device: bf16_measures_fast)

    cpu(True)
    native = {"backend": "hf", "device": "cpu", "weights": "float32", "generation": "bfloat16"}
    assert engine_identity(ModelConfig()) == native
    counting = Counting(tokenizer)
    evaluate(config(), questions(2), tmp_path, counting.resources())
    cpu(False)  # the same command where bf16 measures slower than fp32
    assert engine_identity(ModelConfig())["generation"] == "float32"
    with pytest.raises(EvalError, match="engine: hf/cpu/float32/bfloat16 there, hf/cpu/float32/fl"):
        evaluate(config(), questions(4), tmp_path, counting.resources())
    pinned = config(model=ModelConfig(generation_dtype="bfloat16"))  # what made the folder
    assert evaluate(pinned, questions(4), tmp_path, counting.resources())["n"] == 4
    ct2 = {"backend": "ct2", "compute_type": "int8"}
    assert engine_identity(ModelConfig(backend="ct2")) == ct2


def test_a_vllm_engine_is_recorded_with_the_dtype_it_computes_in(monkeypatch) -> None:
    """vLLM computes in bf16 where bf16 is fast, whatever the fp32 weights on disk: a folder
    written that way must not accept rows of an fp32 engine (it once recorded "float32")."""
    from searchrl.models import vllm_backend

    vllm = ModelConfig(backend="vllm", device="cpu")
    for fast, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(vllm_backend, "fast_bf16", lambda device, fast=fast: fast)
        assert engine_identity(vllm) == {"backend": "vllm", "dtype": dtype}
    pinned = ModelConfig(backend="vllm", device="cpu", generation_dtype="float32")
    monkeypatch.setattr(vllm_backend, "fast_bf16", lambda device: True)
    assert engine_identity(pinned) == {"backend": "vllm", "dtype": "float32"}


def test_a_folder_refuses_rows_of_another_engine_class(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer)
    evaluate(config(), questions(2), tmp_path, counting.resources())
    counting.policy = Policy(SlowBackend(tokenizer, 0.0), tokenizer, None)  # e.g. a ct2 fallback
    with pytest.raises(EvalError, match="generated with ScriptedBackend, but SlowBackend"):
        evaluate(config(), questions(4), tmp_path, counting.resources())
    assert len(rows(tmp_path)) == 2


def test_a_folder_refuses_other_questions_under_the_same_ids(tokenizer, tmp_path) -> None:
    counting = Counting(tokenizer)
    evaluate(config(), questions(2), tmp_path, counting.resources())
    other = [replace(q, question=q.question + " in another world") for q in questions(2)]
    with pytest.raises(EvalError, match="another question under id 'toy:0'"):
        evaluate(config(), other, tmp_path, counting.resources())


def _flashrag(root: Path, name: str, splits: dict[str, int]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for split, n in splits.items():
        lines = [json.dumps({"id": f"{split}_{i}", "question": f"{name} {split} {i}?",
                             "golden_answers": ["a"]}) for i in range(n)]  # fmt: skip
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


def test_flashrag_roots_load_the_evaluated_split_never_train(tmp_path) -> None:
    root = tmp_path / "flashrag"
    _flashrag(root, "nq", {"train": 5, "dev": 3, "test": 4})
    _flashrag(root, "hotpotqa", {"train": 5, "dev": 3})  # FlashRAG evaluates HotpotQA on dev
    _flashrag(root, "mine", {"train": 2, "validation": 2})
    loaded = load_sets([str(root)], limit=0)
    assert {q.source for q in loaded} == {"nq", "hotpotqa", "mine"}
    assert {q.uid.split(":")[1].split("_")[0] for q in loaded if q.source == "nq"} == {"test"}
    assert all(q.uid.startswith("hotpotqa:dev_") for q in loaded if q.source == "hotpotqa")
    assert all("validation" in q.uid for q in loaded if q.source == "mine")
    assert not [q for q in loaded if "train" in q.uid]
    one = load_sets([str(root / "nq")], limit=2)  # one set's folder
    assert [q.uid for q in one] == ["nq:test_0", "nq:test_1"]
    _flashrag(root, "trainonly", {"train": 3})
    with pytest.raises(ValueError, match="train questions are never evaluated"):
        load_sets([str(root / "trainonly")], limit=0)
