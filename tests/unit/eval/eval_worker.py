"""A child process for the kill/restart test: evaluates `direct` on N made-up questions with a
scripted backend that sleeps per batch, so the parent can SIGKILL it mid-run.

Usage: python eval_worker.py OUT_DIR TOKENIZER_DIR N_QUESTIONS BATCH_SIZE SECONDS_PER_BATCH
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rollout_fakes import ScriptedBackend
from transformers import AutoTokenizer

from searchrl.config.eval import EvalConfig
from searchrl.config.model import ModelConfig
from searchrl.eval.harness import Resources, evaluate
from searchrl.models.loading import Policy
from searchrl.types import Question


def questions(n: int) -> list[Question]:
    return [Question(f"toy:{i}", f"What is {i} plus one", (str(i + 1),), "toy") for i in range(n)]


def answer(context: str) -> str:
    number = int(context.split("What is ")[-1].split(" ")[0])
    return f"<answer> {number + 1} </answer>"


class SlowBackend(ScriptedBackend):
    def __init__(self, tokenizer, pause: float):
        super().__init__(tokenizer, answer)
        self.pause = pause

    def generate(self, prompts, params):
        time.sleep(self.pause)
        return super().generate(prompts, params)


def main() -> None:
    out, tokenizer_dir, n, batch, pause = sys.argv[1:6]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    policy = Policy(SlowBackend(tokenizer, float(pause)), tokenizer, None)
    resources = Resources(open_retriever=lambda: None, load_policy=lambda: policy)
    # The scripted backend stands in for HF, as in the parent's resume (where a conftest patch
    # keeps `auto` off vLLM); naming it keeps the two records equal where vLLM is installed.
    model = ModelConfig(backend="hf")
    config = EvalConfig(method="direct", batch_size=int(batch), progress=False, model=model)
    evaluate(config, questions(int(n)), Path(out), resources)


if __name__ == "__main__":
    main()
