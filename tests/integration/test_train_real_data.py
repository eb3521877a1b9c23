"""The papers' own setting through the real CLI: `searchrl index --kind dense` over a corpus,
then `searchrl train` on Search-R1's training parquet (written as `qa_search_train_merge.py`
writes it) with that dense index searched in process; and a paper preset on a machine without
the paper's files stopping with one line before anything is loaded or generated."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config.model import ModelConfig
from searchrl.data.templates import SEARCH_R1_TEMPLATE, render_chat
from searchrl.models.generation import Generation
from searchrl.models.loading import embedded_gguf_path, load_tokenizer, tiny_model
from searchrl.retrieval import load_index
from searchrl.retrieval.manifest import read_manifest

pytest.importorskip("faiss")

CORPUS = [
    ("p0", '"Mount Everest"\nMount Everest is the highest mountain above sea level.'),
    ("p1", '"Tea"\nTea is an aromatic drink brewed from the leaves of Camellia sinensis.'),
    ("p2", '"Hamlet"\nHamlet is a tragedy written by William Shakespeare around 1600.'),
    ("p3", '"Danube"\nThe Danube is the second-longest river in Europe.'),
    ("p4", '"Marie Curie"\nMarie Curie was a physicist who won two Nobel Prizes.'),
    ("p5", '"Photosynthesis"\nPlants turn light into chemical energy by photosynthesis.'),
    ("p6", '"Ostrava"\nOstrava is a city in the north-east of the Czech Republic.'),
    ("p7", '"Jazz"\nJazz is a music genre that began in New Orleans.'),
]
QUESTIONS = {
    "nq": [
        ("train_0", "what is the highest mountain above sea level", ["Mount Everest"]),
        ("train_1", "who wrote the tragedy hamlet", ["William Shakespeare"]),
    ],
    "hotpotqa": [("train_0", "Which drink is brewed from Camellia leaves", ["Tea"])],
}


@pytest.fixture(scope="module")
def tiny_model_dir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    gguf = embedded_gguf_path()
    cache = request.config.cache.mkdir(f"searchrl-tokenizer-{gguf.stem}-{gguf.stat().st_size}")
    tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
    out = tmp_path_factory.mktemp("tiny_model")
    tiny_model(tokenizer, hidden_size=32, num_layers=1, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


class SearchingBackend:
    """Stands in for the policy's sampler only: searches with the question, then answers with
    the first title shown (a tiny random model never writes the tags). Everything else is the
    real run: the parquet, the prompt, the dense index, the rollout, the update."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[Any]) -> list[Any]:
        outputs = []
        for prompt, sampling in zip(prompts, params, strict=True):
            context = self.tokenizer.decode(list(prompt))
            if "<information>" not in context.rsplit("Question:", 1)[-1]:
                question = re.findall(r"Question: (.*?)\n", context)[-1]
                text = f"<think> I search. </think>\n<search> {question} </search>"
            else:
                title = re.findall(r'Doc 1\(Title: "([^"]*)', context)[-1]
                text = f"<answer> {title} </answer>"
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling.max_new_tokens]
            outputs.append(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids), "stop"))
        return outputs

    def sync_weights(self, source: Any = None, version: Any = None) -> None:
        """Scripted text does not depend on the weights."""


@pytest.mark.slow
def test_interface_trains_on_the_merge_parquet_with_a_dense_index(
    tmp_path: Path, tiny_model_dir: Path, merge_parquet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": c}) + "\n" for i, c in CORPUS))
    index = tmp_path / "IDX"
    runner = CliRunner()
    build = ["index", "--kind", "dense", "--corpus", str(corpus), "--out", str(index)]
    built = runner.invoke(app, build)
    assert built.exit_code == 0, built.output
    assert read_manifest(index).kind == "dense"
    train = merge_parquet(tmp_path / "TRAIN.parquet", QUESTIONS)

    seen: list[Any] = []

    def scripted(model: Any, policy: Any, tokenizer: Any, max_len: int, **_: Any) -> Any:
        seen.append(tokenizer)
        return SearchingBackend(tokenizer)

    monkeypatch.setattr("searchrl.train.environment.make_backend", scripted)
    run = tmp_path / "RUN"
    interface = [
        "train", "--config", "tiny_cpu_grpo", "--out", str(run), f"data.train_files={train}",
        f"data.index_dir={index}", "steps=1", "batch_size=2", "n_samples=2", "mini_batch_size=2",
        "data.eval_size=0", "algo.dynamic_sampling=false", "screen.samples=0",
    ]  # fmt: skip
    small = [f"model.name_or_path={tiny_model_dir}", "rollout.max_response_tokens=48",
             "logging.progress=false", "logging.tensorboard=false"]  # fmt: skip
    result = runner.invoke(app, [*interface, *small])
    assert result.exit_code == 0, result.output + repr(result.exception)

    assert not (run / "world").exists()
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["train_files"] == [str(train)]
    trajectories = [json.loads(line) for line in (run / "trajectories" / "step_1.jsonl").open()]
    assert len(trajectories) == 4
    prompts = {f"{s}:{qid}": q for s, items in QUESTIONS.items() for qid, q, _ in items}
    dense = load_index(index)
    tokenizer = seen[0]
    for traj in trajectories:
        uid = traj["uid"]
        assert uid in prompts  # the file's questions, grouped per source
        question = prompts[uid].strip() + "?"
        file_prompt = SEARCH_R1_TEMPLATE.format(question=question)
        assert traj["prompt"] == render_chat(tokenizer, file_prompt)
        (search,) = traj["searches"]
        (expected,) = dense.search([search["query"]], 3)
        assert search["doc_ids"] == [h.document.id for h in expected]
        information = next(s["text"] for s in traj["segments"] if s["role"] == "env")
        assert expected[0].document.text in information
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert metrics[-1]["step"] == 1 and metrics[-1]["env/number_of_valid_search"] == 1.0


def test_a_paper_preset_without_its_files_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("searchrl.train.environment.load_model", never)
    monkeypatch.setattr("searchrl.train.environment.write_world", never)
    monkeypatch.chdir(tmp_path)  # a machine without data/nq_hotpotqa_train
    for preset in ("search_r1_grpo", "search_r1_ppo", "search_r2_grpo"):
        result = CliRunner().invoke(app, ["train", "--config", preset, "--out", "DIR"])
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(
            "error: data.train_files: data/nq_hotpotqa_train/train.parquet not found"
        )
        assert "docs/data.md" in lines[0]
    assert list(tmp_path.iterdir()) == []  # no run folder, no world
