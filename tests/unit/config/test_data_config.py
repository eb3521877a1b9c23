"""`data.train_files` / `data.val_files` on the command line and the rules that tie them to a
search engine and to held-out evaluation."""

from __future__ import annotations

import pytest

from searchrl.config.errors import ConfigError
from searchrl.config.loading import load_config
from searchrl.config.sft import SFTConfig
from searchrl.config.train import TrainConfig


def test_one_path_is_a_list_of_one_and_a_yaml_list_stays_a_list() -> None:
    config = load_config(
        TrainConfig,
        None,
        ["data.train_files=a.parquet", "data.index_dir=idx", "data.val_files=[b.jsonl, c.jsonl]"],
    )
    assert config.data.train_files == ("a.parquet",)
    assert config.data.val_files == ("b.jsonl", "c.jsonl")


def test_real_questions_need_an_index_or_a_server() -> None:
    with pytest.raises(ConfigError, match=r"^data\.index_dir: data\.train_files needs an index"):
        load_config(TrainConfig, None, ["data.train_files=a.parquet", "data.eval_size=0"])
    remote = ["data.retriever=remote", "data.remote.url=http://127.0.0.1:8000/retrieve"]
    config = load_config(
        TrainConfig, None, ["data.train_files=a.parquet", "data.eval_size=0", *remote]
    )
    assert config.data.retriever == "remote"


def test_held_out_evaluation_of_real_questions_needs_val_files() -> None:
    base = ["data.train_files=a.parquet", "data.index_dir=idx"]
    with pytest.raises(ConfigError, match=r"^data\.val_files: data\.eval_size > 0"):
        load_config(TrainConfig, None, base)
    assert load_config(TrainConfig, None, [*base, "data.eval_size=0"]).data.eval_size == 0
    # the warm start evaluates nothing during training: no val_files needed
    assert load_config(SFTConfig, None, base).data.train_files == ("a.parquet",)


def test_val_files_without_train_files_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^data\.val_files: give data\.train_files too"):
        load_config(TrainConfig, None, ["data.val_files=b.jsonl"])


def test_a_paper_preset_runs_on_a_world_once_its_files_are_cleared() -> None:
    from searchrl.cli.train import resolve_preset

    clear = ["data.train_files=[]", "data.val_files=[]", "data.index_dir=", "data.world_dir=W"]
    config = load_config(TrainConfig, resolve_preset("search_r1_grpo"), clear)
    assert (config.data.train_files, config.data.index_dir) == ((), "")
    assert config.data.world_dir == "W"
