"""The vLLM engine and the colocated trainer on this machine, check by check, one table at the
end, exit status 1 when any check fails (`gpu_check.sh` runs it offline on a GPU machine).

    python benchmarks/rollout/gpu_check.py --out DIR [--cpu] [--skip train,placement]

Checks (each a row: ok / FAIL / skip, what was measured, seconds):
  versions   torch, transformers, vLLM (the tested release), the GPUs
  start      an engine on the embedded model's warm start, placed as a training run places it
  sync       perturbed weights change its greedy output, the original weights restore it
  logprobs   its log-probs of sampled tokens against an fp32 forward pass of the same weights,
             at T = 1 and T = 0.7 (the tempered distribution the tokens were drawn from)
  stop       a row ends at the token that completes `</search>`
  sleep      (GPU) sleep hands its memory back, the next sync reloads the weights
  close      (GPU) closing the engine frees its memory: a second engine then starts
  train      (GPU) two GRPO steps of the embedded model, vLLM colocated, against the plan
  plan       the memory plan of the paper's preset at 3B (Qwen2.5-3B's config.json) on this GPU
  placement  (2+ GPUs) each rank's engine on its own GPU

On a CPU (`--cpu`, vLLM's CPU build) the engine checks run in fp32 with tight tolerances, the
GPU ones are skipped; nothing here is a GPU result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

QWEN_3B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 2048,
    "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
}  # fmt: skip
"""Qwen2.5-3B's config.json (from its model card)."""
PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search>. Question: In which country is "
    "the birthplace of the author of The Old Man and the Sea?"
)
ROWS: list[tuple[str, str, str, float]] = []


def check(name: str, run: Callable[[], str]) -> None:
    """Run one check; a SkipCheck or an exception is its row's status."""
    started = time.perf_counter()
    try:
        status, detail = "ok", run()
    except SkipCheck as skip:
        status, detail = "skip", str(skip)
    except Exception as err:
        status, detail = "FAIL", f"{type(err).__name__}: {err}"
    ROWS.append((name, status, " ".join(detail.split())[:110], time.perf_counter() - started))
    print(f"[{status}] {name}: {detail}", file=sys.stderr, flush=True)


class SkipCheck(Exception):
    """Not applicable here (no GPU, one GPU)."""


class Session:
    """What the checks share: the warm start on the trainer's side and the engine."""

    def __init__(self, cpu: bool, out: Path) -> None:
        import torch

        from searchrl.config.model import ModelConfig
        from searchrl.models.loading import load_model

        self.cpu, self.out = cpu, out
        self.device = "cpu" if cpu else "cuda"
        loaded = load_model(
            ModelConfig(name_or_path="embedded-warm", dtype="float32", device="cpu")
        )
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.reference = self.model.to(self.device)  # the fp32 forward pass
        self.dtype = "float32" if cpu else "bfloat16"
        self.engine: Any = None
        self.prompt = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(self.prompt, list):
            self.prompt = list(self.prompt["input_ids"])
        self.torch = torch

    def config(self, **overrides: Any) -> Any:
        from dataclasses import replace

        from searchrl.config.model import ModelConfig

        return replace(
            ModelConfig(vllm_kv_cache_gib=0.5, vllm_gpu_memory_utilization=0.3), **overrides
        )

    def start(self) -> Any:
        from searchrl.models.vllm_backend import VLLMBackend

        return VLLMBackend.from_module(
            self.model, self.tokenizer, self.config(), dtype=self.dtype, max_model_len=2048
        )

    def greedy(self, tokens: int = 24) -> list[int]:
        from searchrl.models.generation import SamplingParams

        params = [SamplingParams(max_new_tokens=tokens, temperature=0.0)]
        return self.engine.generate([self.prompt], params)[0].token_ids

    def free_gib(self) -> float:
        return self.torch.cuda.mem_get_info()[0] / 2**30


def versions(session: Session) -> str:
    import torch
    import transformers
    import vllm

    from searchrl.models.vllm_compat import check_release

    check_release(vllm.__version__)
    gpus = ", ".join(
        f"{torch.cuda.get_device_name(i)} "
        f"{torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB"
        for i in range(torch.cuda.device_count())
    )
    return (
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"vLLM {vllm.__version__}; {gpus or 'no GPU'}"
    )


def start(session: Session) -> str:
    session.engine = session.start()
    where = session.engine.where
    place = "this process" if session.engine.in_process else "own processes"
    return (
        f"{session.engine.start_s:.1f} s, {place}, GPU {where.gpu}, sleeps={where.sleeps}, "
        f"{session.dtype}"
    )


def sync(session: Session) -> str:
    torch = session.torch
    before = session.greedy()
    original = {k: v.clone() for k, v in session.model.state_dict().items()}
    with torch.no_grad():
        for name, param in session.model.named_parameters():
            if "mlp" in name:
                param.mul_(0.5)
    assert session.engine.sync_weights(session.model)
    perturbed = session.greedy()
    seconds = session.engine.last_sync_s
    session.model.load_state_dict(original)
    assert session.engine.sync_weights(session.model)
    restored = session.greedy()
    assert perturbed != before, "the perturbed weights did not change the output"
    assert restored == before, "the original weights did not restore the output"
    assert not session.engine.sync_weights(session.model), "unchanged weights synced again"
    return f"output changed and restored; sync {seconds:.2f} s"


def logprobs(session: Session) -> str:
    from searchrl.models.generation import SamplingParams

    torch = session.torch
    tolerance = 2e-3 if session.cpu else 0.05  # fp32 engine; bf16 engine against fp32
    found = []
    for temperature in (1.0, 0.7):
        params = [SamplingParams(max_new_tokens=48, temperature=temperature, seed=3)]
        out = session.engine.generate([session.prompt], params)[0]
        ids = torch.tensor([session.prompt + out.token_ids], device=session.device)
        with torch.no_grad():
            logits = session.reference(ids).logits[0, len(session.prompt) - 1 : -1].float()
        want = torch.log_softmax(logits / temperature, -1)
        want = want.gather(1, torch.tensor(out.token_ids, device=session.device)[:, None])[:, 0]
        diff = (torch.tensor(out.logprobs, device=session.device) - want).abs()
        found.append(f"T={temperature}: mean {diff.mean():.1e} max {diff.max():.1e}")
        assert float(diff.mean()) < tolerance, found[-1]
    return "; ".join(found) + f" (mean < {tolerance})"


def stop(session: Session) -> str:
    from searchrl.models.generation import SamplingParams

    free = session.engine.generate(
        [session.prompt], [SamplingParams(max_new_tokens=256, temperature=0.0)]
    )[0]
    if "</search>" not in free.text:
        raise AssertionError(f"the warm start wrote no </search> in 256 tokens: {free.text[:80]!r}")
    stopped = session.engine.generate(
        [session.prompt], [SamplingParams(max_new_tokens=256, temperature=0.0, stop=("</search>",))]
    )[0]
    prefix = next(
        n for n in range(1, len(free.token_ids) + 1)
        if "</search>" in session.tokenizer.decode(free.token_ids[:n])
    )  # fmt: skip
    assert stopped.stop_reason == "stop" and stopped.token_ids == free.token_ids[:prefix]
    return f"stopped after {prefix} tokens at the one completing </search>"


def sleep(session: Session) -> str:
    if session.cpu:
        raise SkipCheck("the CPU build has no sleep mode")
    if not session.engine.where.sleeps:
        raise AssertionError("the engine does not sleep on this GPU")
    awake = session.free_gib()
    session.engine.release()
    asleep = session.free_gib()
    assert session.engine.sync_weights(session.model)  # wakes, reloads
    before = session.greedy()
    assert asleep - awake > 1.0, f"sleeping freed {asleep - awake:.2f} GiB"
    return f"sleep freed {asleep - awake:.1f} GiB; woke and reloaded ({len(before)} tokens out)"


def close(session: Session) -> str:
    if session.cpu:
        raise SkipCheck("GPU memory only")
    import gc

    free_before = session.free_gib()
    session.engine.close()
    session.engine = None
    gc.collect()
    freed = session.free_gib() - free_before
    second = session.start()
    second.close()
    assert freed > 1.0, f"closing freed {freed:.2f} GiB"
    return f"close freed {freed:.1f} GiB; a second engine started and closed"


def train(session: Session) -> str:
    if session.cpu:
        raise SkipCheck("GPU only (minutes of CPU)")
    session.reference.cpu()
    session.torch.cuda.empty_cache()
    out = session.out / "grpo"
    command = [
        sys.executable, "-m", "searchrl", "train", "--config", "tiny_cpu_grpo", "--out", str(out),
        "--force", "steps=2", "save_every=2", "data.eval_size=0", "model.backend=vllm",
        "model.vllm_gpu_memory_utilization=0.3",
    ]  # fmt: skip
    total = session.torch.cuda.mem_get_info()[1]
    peak = 0
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while child.poll() is None:
        peak = max(peak, total - session.torch.cuda.mem_get_info()[0])
        time.sleep(0.2)
    log = child.stdout.read() if child.stdout else ""
    (session.out / "grpo.log").write_text(log)
    assert child.returncode == 0, log.strip().splitlines()[-1] if log.strip() else "no output"
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    synced = [s.get("timing_s/weight_sync", 0.0) for s in steps]
    plan = _plan(["--config", "tiny_cpu_grpo", "model.backend=vllm",
                  "model.vllm_gpu_memory_utilization=0.3"])  # fmt: skip
    return (
        f"{len(steps)} steps, syncs {', '.join(f'{s:.2f}' for s in synced)} s; peak "
        f"{peak / 2**30:.1f} GiB on the GPU (device-wide), plan {plan}"
    )


def _plan(args: list[str]) -> str:
    """`searchrl train --dry-run` for this GPU: its last line."""
    import torch

    memory = (
        torch.cuda.get_device_properties(0).total_memory / 2**30
        if torch.cuda.is_available()
        else 80
    )
    done = subprocess.run(
        [sys.executable, "-m", "searchrl", "train", "--dry-run", *args, "plan.gpus=1",
         f"plan.gpu_memory_gib={memory:.1f}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = (done.stdout + done.stderr).strip().splitlines()
    return f"exit {done.returncode}: {lines[-1] if lines else ''}"


def plan(session: Session) -> str:
    folder = session.out / "qwen2.5-3b"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(QWEN_3B))
    found = _plan(["--config", "search_r1_grpo", f"model.name_or_path={folder}"])
    assert found.startswith(("exit 0", "exit 1")) and ("fits" in found or "more than" in found), (
        found
    )
    return found


PLACEMENT_WORKER = """
import json, os, sys, torch
from searchrl.train.run import setup_distributed
from searchrl.train.environment import start_engine_first
from searchrl.config.model import ModelConfig
from searchrl.config.train import PolicyConfig
dist = setup_distributed(PolicyConfig(strategy="fsdp"))
before = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
config = ModelConfig(backend="vllm", vllm_gpu_memory_utilization=0.2, vllm_sleep_mode="off")
engine = start_engine_first(config, PolicyConfig(), 2048, seed=dist.rank)
after = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
used = [(b - a) / 2**30 for b, a in zip(before, after)]
json.dump({"rank": dist.rank, "used": used}, open(f"{sys.argv[1]}/rank{dist.rank}.json", "w"))
engine.close()
"""


def placement(session: Session) -> str:
    if session.cpu:
        raise SkipCheck("GPU only")
    count = session.torch.cuda.device_count()
    if count < 2:
        raise SkipCheck(f"{count} GPU visible, it needs 2")
    script = session.out / "placement_worker.py"
    script.write_text(PLACEMENT_WORKER)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script),
         str(session.out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-1]
    used = [json.loads((session.out / f"rank{r}.json").read_text())["used"] for r in (0, 1)]
    for rank, per_gpu in enumerate(used):  # each rank's engine on its own GPU
        assert per_gpu[rank] > 1.0 and per_gpu[1 - rank] < per_gpu[rank], used
    return "engine memory by rank and GPU: " + "; ".join(
        f"rank {r}: " + ", ".join(f"{g:.1f}" for g in per_gpu) for r, per_gpu in enumerate(used)
    )


CHECKS = {
    "versions": versions, "start": start, "sync": sync, "logprobs": logprobs, "stop": stop,
    "sleep": sleep, "close": close, "train": train, "plan": plan, "placement": placement,
}  # fmt: skip
NEEDS_ENGINE = ("sync", "logprobs", "stop", "sleep", "close")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="vLLM's CPU build, no GPU checks")
    parser.add_argument("--skip", default="", help="comma-separated checks to leave out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    skipped = set(filter(None, args.skip.split(",")))
    session = Session(args.cpu, args.out)
    for name, run in CHECKS.items():
        if name in skipped:
            ROWS.append((name, "skip", "--skip", 0.0))
        elif name in NEEDS_ENGINE and session.engine is None:
            ROWS.append((name, "FAIL", "no engine (the start check failed)", 0.0))
        else:
            check(name, lambda run=run: run(session))
    if session.engine is not None:
        session.engine.close()
    print(f"\n{'check':10} {'status':6} {'s':>6}  measured")
    for name, status, detail, seconds in ROWS:
        print(f"{name:10} {status:6} {seconds:6.1f}  {detail}")
    failed = [name for name, status, *_ in ROWS if status == "FAIL"]
    print(f"\n{len(ROWS) - len(failed)} of {len(ROWS)} checks passed or skipped"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
