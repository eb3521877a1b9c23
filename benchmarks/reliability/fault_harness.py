"""What `benchmarks/reliability/faults.py` and `tests/integration/test_faults.py` share: a tiny
setup (a
random model over the real tokenizer, a tiny world, its BM25 index), the `searchrl` command in a
fresh interpreter, a retrieval server process to kill, a retrieval proxy that misbehaves on
purpose, and a trainer whose policy searches on every question.

A random tiny model never writes `<search>`, so retrieval faults are injected into the real
trainer (`train.loop.Trainer`, real forward/backward passes of the tiny model) driven by a
scripted generation backend that searches for the question, then answers with the first
retrieved title: every trajectory makes one real HTTP search per step.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
TINY = {"hidden_size": 32, "num_layers": 1, "seed": 0}


@dataclass(frozen=True)
class Setup:
    """Files every scenario reads (built once per work directory)."""

    work: Path
    model: Path
    world: Path
    index: Path


def prepare(work: Path, tokenizer_cache: Path | None = None) -> Setup:
    """Tokenizer (cached in `tokenizer_cache`, default inside `work`), tiny random model, tiny
    world and its BM25 index, once."""
    from searchrl.config.data import WorldConfig
    from searchrl.config.model import ModelConfig
    from searchrl.data.world import generate_world, write_world
    from searchrl.models.loading import load_tokenizer, tiny_model
    from searchrl.retrieval.index import build_index

    setup = Setup(work, work / "model", work / "world", work / "index")
    work.mkdir(parents=True, exist_ok=True)
    if not (setup.model / "config.json").is_file():
        cache = tokenizer_cache or work / "tokenizer"
        tokenizer = load_tokenizer(ModelConfig(), cache_dir=cache)
        tiny_model(tokenizer, **TINY).save_pretrained(setup.model)
        tokenizer.save_pretrained(setup.model)
    if not (setup.world / "manifest.json").is_file():
        world = WorldConfig(num_entities=40, train_questions=24, dev_questions=4,
                            test_questions=4, hop_weights=(1.0, 0.0, 0.0, 0.0))  # fmt: skip
        write_world(generate_world(world), setup.world)
    if not (setup.index / "manifest.json").is_file():
        build_index("bm25", setup.world / "corpus.jsonl", setup.index, force=True)
    return setup


def train_overrides(setup: Setup, steps: int) -> list[str]:
    """A GRPO run small enough for seconds per step on one CPU thread; one rollout round per
    step (no dynamic sampling), so fault counts per step are known."""
    return [
        "algo.dynamic_sampling=false",
        f"model.name_or_path={setup.model}", "model.generation_dtype=auto", f"steps={steps}",
        "batch_size=2", "n_samples=2", "mini_batch_size=2", "micro_batch_size=4",
        "save_every=1", "keep_checkpoints=2", "data.eval_size=2", f"data.world_dir={setup.world}",
        "rollout.max_turns=1", "rollout.max_response_tokens=8", "policy.autocast=fp32",
        "policy.torch_threads=1", "logging.progress=false", "logging.tensorboard=false",
        "screen.samples=0", "signal.probe_every=0",
    ]  # fmt: skip


def searchrl(*args: str, **popen: Any) -> subprocess.Popen[str]:
    """`python -m searchrl ARGS` from this checkout, one torch thread, output captured."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "searchrl", *args], env=env, text=True, **popen)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`searchrl serve` in its own process, so it can be SIGKILLed and started again."""

    def __init__(self, index: Path, port: int, log: Path) -> None:
        self.index, self.port, self.log = index, port, log
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        """The `/retrieve` endpoint."""
        return f"http://127.0.0.1:{self.port}/retrieve"

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until `/health` says the index is loaded."""
        out = self.log.open("a")
        self.proc = searchrl("serve", "--index", str(self.index), "--port", str(self.port),
                             stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url.replace("/retrieve", "/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"retrieval server did not come up; see {self.log}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, connections just drop."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


@contextmanager
def outage(server: ServerProcess, after_s: float, down_s: float) -> Iterator[dict[str, float]]:
    """Kill the server `after_s` seconds into the block and start it again `down_s` later;
    yields the moments (monotonic) of both, filled in as they happen."""
    times: dict[str, float] = {}

    def timeline() -> None:
        time.sleep(after_s)
        server.kill()
        times["killed"] = time.monotonic()
        time.sleep(down_s)
        server.start()
        times["restarted"] = time.monotonic()

    thread = threading.Thread(target=timeline, daemon=True)
    thread.start()
    try:
        yield times
    finally:
        thread.join()


class SearchingBackend:
    """A generation backend that always searches first (for the question) and then answers
    with the title of the first passage it was shown, as real token ids of the tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[Any]) -> list[Any]:
        """One scripted turn per prompt."""
        from searchrl.models.generation import Generation

        outputs = []
        for prompt, sampling in zip(prompts, params, strict=True):
            text = self._turn(self.tokenizer.decode(list(prompt)))
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling.max_new_tokens]
            outputs.append(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids), "stop"))
        return outputs

    def _turn(self, context: str) -> str:
        if "<information>" not in context.rsplit("Question:", 1)[-1]:
            question = re.findall(r"Question: (.*?)\n", context)
            return f"<search> {question[-1] if question else 'anything'} </search>"
        title = re.findall(r"Doc 1\(Title: \"?([^\")]*)", context)
        return f"<answer> {title[-1] if title else 'unknown'} </answer>"

    def sync_weights(self, source: Any = None, version: Any = None) -> None:
        """Scripted text does not depend on the weights."""


def searching_trainer(setup: Setup, out: Path, overrides: list[str]) -> Any:
    """The real Trainer on the tiny model, its rollouts written by `SearchingBackend` and
    searched through the retriever `overrides` configure (e.g. `data.retriever=remote`)."""
    from searchrl.config.loading import load_config
    from searchrl.config.presets import presets_dir
    from searchrl.config.train import TrainConfig
    from searchrl.reward.outcome import make_reward
    from searchrl.train.environment import build_environment, load_policy, make_rollout_fn
    from searchrl.train.loop import Trainer
    from searchrl.train.models import frozen_reference

    config = load_config(TrainConfig, presets_dir() / "tiny_cpu_grpo.yaml",
                         [*train_overrides(setup, 1000), "rollout.max_response_tokens=64",
                          *overrides])  # fmt: skip
    env = build_environment(config.data, out)
    policy, tokenizer = load_policy(config.model, config.policy)
    rollout = make_rollout_fn(SearchingBackend(tokenizer), policy, tokenizer, env.retriever,
                              config.rollout)  # fmt: skip
    return Trainer(config, policy, None, frozen_reference(policy, lora=False),
                   int(tokenizer.pad_token_id), rollout, make_reward(config.reward),
                   env.questions(config.data.train_split))  # fmt: skip


def failed_count(trajectories: Sequence[Any]) -> int:
    """Trajectories whose search failed after the client's retries."""
    return sum(t.stats.failed is not None for t in trajectories)


def steps_until(trainer: Any, done: Callable[[], bool], limit: int) -> list[dict[str, Any]]:
    """Run training steps until `done()` (checked between steps) or `limit` steps; one row per
    step: its failed trajectories, its size and its metrics."""
    rows = []
    while len(rows) < limit and not done():
        metrics, trajectories = trainer.step()
        waits = [t.stats.retrieval_s for t in trajectories] or [0.0]
        rows.append({"failed": failed_count(trajectories), "trajectories": len(trajectories),
                     "metrics": metrics, "retrieval_s": max(waits)})  # fmt: skip
    return rows
