"""`rollout.prompt_template` and a file's own prompt: what the policy is asked is the file's
message as written when it has one, the configured template otherwise, the R1 prompt without
search, each inside the chat template."""

from __future__ import annotations

import dataclasses

import pytest
from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.errors import ConfigError
from searchrl.config.loading import from_dict
from searchrl.config.rollout import RolloutConfig
from searchrl.data.templates import r1_prompt, render_chat, search_r1_prompt
from searchrl.rollout.loop import run_rollouts
from searchrl.types import Question

OWN = "Use the encyclopedia. <search> q </search> to search. Question: who built it?\n"
PLAIN = Question("nq:1", "who built the tower", ("Eiffel",))
FROM_FILE = Question("nq:2", "who built it?", ("Eiffel",), prompt=OWN)


def _prompts(tokenizer, docs, config: RolloutConfig) -> list[str]:
    backend = ScriptedBackend(tokenizer, lambda context: "<answer> Eiffel </answer>")
    trajs = run_rollouts(backend, tokenizer, DictRetriever(docs), [PLAIN, FROM_FILE], config)
    for traj in trajs:
        assert tokenizer.decode(traj.prompt_ids) == traj.prompt
    return [t.prompt for t in trajs]


def test_default_is_the_paper_prompt_and_a_file_prompt_is_used_as_written(tokenizer, docs) -> None:
    plain, own = _prompts(tokenizer, docs, RolloutConfig())
    assert plain == render_chat(tokenizer, search_r1_prompt(PLAIN.question))
    assert own == render_chat(tokenizer, OWN)


def test_a_custom_template_and_file_prompts_switched_off(tokenizer, docs) -> None:
    template = "Search with <search>, answer with <answer>. Q: {question}\n"
    config = RolloutConfig(prompt_template=template, file_prompt=False, use_chat_template=False)
    plain, own = _prompts(tokenizer, docs, config)
    assert plain == "Search with <search>, answer with <answer>. Q: who built the tower?\n"
    assert own == "Search with <search>, answer with <answer>. Q: who built it?\n"


def test_without_search_the_r1_prompt_replaces_a_file_prompt(tokenizer, docs) -> None:
    config = dataclasses.replace(RolloutConfig(), search=False, use_chat_template=False)
    assert _prompts(tokenizer, docs, config)[1] == r1_prompt(FROM_FILE.question)


def test_a_template_must_place_the_question() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.prompt_template: .*placeholder"):
        from_dict(RolloutConfig, {"prompt_template": "Answer it."}, "rollout.")
