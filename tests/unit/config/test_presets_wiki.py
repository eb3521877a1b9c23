"""The CPU presets on real questions run the tiny presets' recipe on the shared data, and the
split they name keeps every evaluation question out of training."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config.loading import load_config, to_dict
from searchrl.config.presets import resolve_config as resolve_preset
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig
from searchrl.data.sources import load_sources
from searchrl.eval.sets import load_sets
from searchrl.reward.metrics import normalize_answer

EVAL_ROWS = 500
"""Evaluation uses the first 100 rows of each of the seven sets (docs/baselines.md); no
training or held-out question may come from the first 500, so larger evaluations stay clean."""
SHARED_PREFIX = "../shared/data"


@pytest.mark.parametrize(
    ("cls", "tiny", "wiki"),
    [(TrainConfig, "tiny_cpu_grpo", "wiki_cpu_grpo"), (SFTConfig, "tiny_cpu_sft", "wiki_cpu_sft")],
)
def test_the_wiki_presets_are_the_tiny_recipes_on_real_data(
    cls: type, tiny: str, wiki: str
) -> None:
    ours, theirs = (to_dict(load_config(cls, resolve_preset(n))) for n in (wiki, tiny))
    data = ours.pop("data")
    theirs.pop("data")
    if cls is TrainConfig:  # real questions: screened among those their passages answer
        assert ours.pop("screen")["gold_retrieved"] and ours["signal"].pop("probe_files")
        theirs.pop("screen"), theirs["signal"].pop("probe_files")
    if cls is SFTConfig:  # more references exist than the world's 300 (docs/baselines.md)
        for key in ("max_examples", "epochs", "answer_weight"):
            ours.pop(key), theirs.pop(key)
    # Wikipedia passages are longer than the world's: the top-3 fit whole in 500 tokens
    # (benchmarks/eval/obs_budget.py, docs/baselines.md), where 300 cut the third off
    assert ours["rollout"].pop("max_obs_tokens") == 500
    theirs["rollout"].pop("max_obs_tokens")
    assert ours == theirs
    assert data["train_files"] and data["index_dir"]


def _specs(specs: list[str], shared: Path) -> list[str]:
    return [s.replace(SHARED_PREFIX, str(shared), 1) for s in specs]


def test_no_evaluation_question_is_trained_on(shared_data: Path) -> None:
    data = load_config(TrainConfig, resolve_preset("wiki_cpu_grpo")).data
    sft = load_config(SFTConfig, resolve_preset("wiki_cpu_sft")).data
    assert (sft.train_files, sft.val_files) == (data.train_files, data.val_files)
    train = load_sources(_specs(list(data.train_files), shared_data), "train", 0)
    held = load_sources(_specs(list(data.val_files), shared_data), "test", 0)
    evaluation = load_sets([str(shared_data / "qa")], EVAL_ROWS)
    assert {q.source for q in train} == {"nq", "hotpotqa"}
    assert len({q.source for q in evaluation}) == 7
    texts = {normalize_answer(q.question) for q in evaluation}
    for pool in (train, held):
        assert not {q.uid for q in pool} & {q.uid for q in evaluation}
        assert not {normalize_answer(q.question) for q in pool} & texts
    assert not {q.uid for q in train} & {q.uid for q in held}
