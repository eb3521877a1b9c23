"""The one CLI grammar: `--version`, `config show/list`, settings layered the same way in every
command (defaults < a run's settings < --config < options < key=value), and `key=value`
arguments recognised among a command's own positional values. No model is loaded here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import searchrl
from searchrl.cli import app
from searchrl.cli.options import run_rollout, settings, split_overrides
from searchrl.config.describe import settings as all_settings
from searchrl.config.errors import ConfigError, OverrideError
from searchrl.config.eval import EvalConfig
from searchrl.config.interactive import InteractiveConfig
from searchrl.config.loading import load_config, to_dict
from searchrl.config.presets import preset_names, presets_dir, resolve_config
from searchrl.config.retrieval import RetrievalConfig
from searchrl.config.train import TrainConfig


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_version_is_the_package_version() -> None:
    code, out, _ = invoke("--version")
    assert code == 0 and out.strip() == f"searchrl {searchrl.__version__}"


def test_config_show_prints_every_resolved_setting_with_its_doc() -> None:
    code, out, err = invoke("config", "show", "tiny_cpu_grpo")
    assert code == 0, err
    lines = out.splitlines()
    assert "settings of `searchrl train`" in lines[0]
    rows = {line[2:].split()[0]: line for line in lines[1:]}
    preset = load_config(TrainConfig, resolve_config("tiny_cpu_grpo"))
    assert list(rows) == [s.key for s in all_settings(preset)]  # every setting, in order
    screen = rows["screen.samples"]  # set by the preset: starred, with its value and meaning
    assert screen.startswith("* ") and screen.split()[2] == "4"
    assert "k samples per question" in screen
    assert rows["algo.loss_agg"].startswith("  ")  # the preset keeps the default
    assert rows["seed"].startswith("  ")  # the preset keeps the default seed: no star


def test_config_show_applies_overrides_and_reads_run_folders(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    trained = load_config(TrainConfig, resolve_config("tiny_cpu_grpo"), ["steps=7"])
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(trained), sort_keys=False))
    code, out, _ = invoke("config", "show", str(run), "--changed", "optim.lr=2e-6")
    assert code == 0
    rows = {line[2:].split()[0]: line.split()[2] for line in out.splitlines()[1:]}
    assert rows["steps"] == "7" and rows["optim.lr"] == "2e-06"
    assert "rollout.temperature" not in rows  # --changed: the defaults are left out
    code, out, _ = invoke("config", "show", "eval")
    assert code == 0 and "rollout.max_turns" in out and "settings of `searchrl eval`" in out


def test_config_show_refuses_bad_input_in_one_line() -> None:
    code, _, err = invoke("config", "show", "eval", "rollout.max_turns=[1")
    assert code == 2 and err.count("\n") == 1 and "rollout.max_turns: cannot parse" in err
    code, _, err = invoke("config", "show", "no_such_preset")
    assert code == 2 and "tiny_cpu_grpo" in err  # the error lists what exists


def test_config_list_names_every_shipped_preset_and_its_command() -> None:
    code, out, _ = invoke("config", "list")
    assert code == 0
    for name in preset_names():
        assert name in out
    assert any(line.split()[:2] == ["tiny_cpu_sft", "sft"] for line in out.splitlines())


def test_presets_are_package_files_and_paths_still_work(tmp_path: Path) -> None:
    assert resolve_config("tiny_cpu_grpo") == presets_dir() / "tiny_cpu_grpo.yaml"
    assert presets_dir().parent == Path(searchrl.__file__).parent
    own = tmp_path / "mine.yaml"
    own.write_text("steps: 3\n")
    assert settings(TrainConfig, str(own)).steps == 3
    with pytest.raises(OverrideError, match="no config file or preset named 'nope'"):
        resolve_config("nope")


def test_settings_are_layered_in_one_order(tmp_path: Path) -> None:
    file = tmp_path / "e.yaml"
    file.write_text("seed: 1\nrollout:\n  max_turns: 2\n  topk: 4\n")
    base = {"rollout": {"max_turns": 9, "topk": 9, "force_answer": True}}
    built = settings(EvalConfig, str(file), ["rollout.topk=5"], {"seed": 3}, base)
    assert built.seed == 3  # the option beats the file
    assert built.rollout.topk == 5  # key=value beats the option and the file
    assert built.rollout.max_turns == 2  # the file beats the run's settings
    assert built.rollout.force_answer is True  # the run's settings beat the defaults
    assert built.rollout.temperature == 0.0  # evaluation's own default (greedy) stays


def test_a_bad_value_is_blamed_on_the_command_line_or_on_the_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("steps: 3\n")
    bad.write_text("steps: 0\n")
    with pytest.raises(OverrideError, match="steps: must be at least 1"):
        settings(TrainConfig, str(good), ["steps=0"])  # the command line: exit code 2
    with pytest.raises(ConfigError) as err:
        settings(TrainConfig, str(bad), ["seed=1"])  # the file: exit code 1
    assert not isinstance(err.value, OverrideError)
    assert settings(TrainConfig, str(bad), ["steps=2"]).steps == 2  # fixed on the line


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("data.train_batch_size=64", "veRL's data.train_batch_size is batch_size"),
        ("actor_rollout_ref.rollout.n=5", "veRL's actor_rollout_ref.rollout.n is n_samples"),
        ("max_turns=2", "veRL's max_turns is rollout.max_turns"),
        ("topk=3", "did you mean rollout.topk?"),
        ("stepz=3", "did you mean steps?"),
    ],
)
def test_unknown_keys_say_what_was_meant(override: str, hint: str) -> None:
    code, _, err = invoke("train", "--config", "tiny_cpu_grpo", "--out", "/nonexistent", override)
    assert code == 2 and err.count("\n") == 1 and hint in err


def test_key_value_arguments_are_told_from_queries_and_folders() -> None:
    plain, overrides = split_overrides(
        ["who is E=mc2", "bm25.k1=1.2", "runs/a=b", "x=1", "dense.index_type=hnsw"],
        RetrievalConfig,
    )
    assert plain == ["who is E=mc2", "runs/a=b", "x=1"]
    assert overrides == ["bm25.k1=1.2", "dense.index_type=hnsw"]


def test_a_trained_runs_rollout_settings_are_found_but_not_its_sampling(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    trained = load_config(TrainConfig, resolve_config("tiny_cpu_grpo"))
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(trained)))
    found = run_rollout(str(run / "model"))
    assert found is not None and found[0] == run
    assert found[1]["max_turns"] == 5 and found[1]["force_answer"] is True
    assert "temperature" not in found[1] and "top_p" not in found[1]
    assert run_rollout(str(tmp_path)) is None and run_rollout("embedded") is None
    built = settings(InteractiveConfig, base={"rollout": found[1]})
    assert built.rollout.max_turns == 5 and built.rollout.temperature == 1.0


def test_every_command_refuses_a_malformed_setting_alike(tmp_path: Path) -> None:
    """The same mistake, as `key=value` or `--set key=value`: one line and exit code 2,
    whatever the command."""
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "q?", "golden_answers": ["a"]}))
    q, d = str(tmp_path / "q.jsonl"), str(tmp_path)
    commands = [
        (["train", "--config", "tiny_cpu_grpo", "--out", d + "/o"], "steps"),
        (["sft", "--config", "tiny_cpu_sft", "--out", d + "/o"], "lr"),
        (["demo", "--out", d + "/o"], "rl.steps"),
        (["world", "--out", d + "/o"], "seed"),
        (["rollout", "--data", q, "--out", d + "/t.jsonl", "--index", d], "rollout.topk"),
        (["chat", "--index", d], "rollout.topk"),
        (["eval", "--method", "direct", "--data", q, "--out", d + "/e"], "rollout.max_turns"),
        (["eval", "judge", d, d], "per_set"),
        (["index", "--kind", "bm25", "--corpus", q, "--out", d + "/i"], "bm25.k1"),
        (["search", "--index", d, "tea"], "bm25.k1"),
        (["serve", "--index", d], "server.port"),
        (["report", d, "--out", d + "/r.html"], "max_trajectories"),
        (["config", "show", "train"], "steps"),
    ]
    for command, key in commands:
        for bad in ([f"{key}=[1"], ["--set", f"{key}=[1"]):
            code, _, err = invoke(*command, *bad)
            assert code == 2, (command, bad, err)
            assert err.count("\n") == 1 and f"{key}: cannot parse" in err, (command, bad, err)


def test_index_takes_positional_settings(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "contents": '"Ada"\nAda wrote programs.'}) + "\n")
    out = tmp_path / "i"
    code, _, err = invoke("index", "--kind", "bm25", "--corpus", str(corpus), "--out", str(out),
                          "bm25.k1=1.2")  # fmt: skip
    assert code == 0, err
    assert json.loads((out / "manifest.json").read_text())["params"]["k1"] == 1.2


def test_a_config_file_of_another_command_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds settings of `searchrl train`") as err:
        settings(EvalConfig, "tiny_cpu_grpo")
    assert not isinstance(err.value, OverrideError)  # the file's fault: exit code 1
    with pytest.raises(OverrideError, match=r"^unknown config key\(s\) algo$"):
        settings(EvalConfig, None, ["algo.kl_coef=0"])  # no file to blame
