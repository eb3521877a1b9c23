"""Faults injected into training and retrieval; prints what was injected and what survived.

    python benchmarks/reliability/faults.py --work runs/faults                # every scenario
    python benchmarks/reliability/faults.py --work runs/faults --kills 20 --outage-s 10 --slow-s 5
    python benchmarks/reliability/faults.py --work runs/faults --only soak    # one scenario again

Scenarios (a tiny random model over the real tokenizer and a tiny world, so all of it runs on
one CPU thread in minutes; see `fault_harness.py`):

- soak: `searchrl train` SIGKILLed at `--kills` random moments and resumed each time with
  `--resume`; after every kill the newest checkpoint must load and the run folder must stay
  under the uninterrupted run's size plus one checkpoint; at the end the model file, the
  metrics and every step's token ids must equal an uninterrupted run's, bit for bit.
- outage: the `/retrieve` server process SIGKILLed during training and restarted
  `--outage-s` later, with the client's default retries (5: a window of 15.5 s) and with
  retries=3 (the old default, a 3.5 s window, shorter than the outage); training must go on,
  no step lost, failed trajectories counted, one log line per failed attempt.
- slow / http500 / garbage: every second request to the server answers after `--slow-s`
  (with a 2 s client timeout), with HTTP 500, or with a non-JSON body; waits must stay under
  the client's bound and retries must save every trajectory.
- disk_full: training into a tmpfs too small for a second checkpoint (needs permission to
  mount one; reported as skipped otherwise): exit code 1, one error line, the previous
  checkpoint still loadable, no partial checkpoint left.

Each scenario's result is kept in `<work>/results/<name>.json`; a rerun skips finished ones
(`--fresh` repeats them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from fault_harness import (
    ServerProcess,
    Setup,
    free_port,
    outage,
    prepare,
    searching_trainer,
    searchrl,
    steps_until,
    train_overrides,
)
from flaky_retrieval import flaky_server
from searchrl.config.retrieval import RemoteConfig
from searchrl.train.checkpoint import latest_checkpoint, load_checkpoint
from searchrl.utils.progress import progress_bar

VOLATILE = ("timing_s/", "perf/", "signal/informative_per_", "signal/trajectories_per_")
"""Metrics of wall or CPU time, which a killed and resumed run cannot repeat."""


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _train(setup: Setup, out: Path, steps: int) -> subprocess.Popen[str]:
    """`searchrl train --resume` with its output appended to `<out>.log` (a pipe nobody reads
    while it runs could fill up and stall it)."""
    log = out.with_suffix(".log").open("a")
    return searchrl("train", "--config", "tiny_cpu_grpo", "--out", str(out), "--resume",
                    *train_overrides(setup, steps), stdout=log,
                    stderr=subprocess.STDOUT)  # fmt: skip


def fingerprint(run: Path) -> dict[str, Any]:
    """What must match bit for bit: model bytes, non-timing metrics, every step's token ids."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = {}
    for path in sorted((run / "trajectories").glob("step_*.jsonl")):
        trajs = [json.loads(line) for line in path.read_text().splitlines()]
        steps[path.name] = [[s["token_ids"] for s in t["segments"]] for t in trajs]
    return {
        "model": hashlib.sha256((run / "model" / "model.safetensors").read_bytes()).hexdigest(),
        "metrics": [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows],
        "tokens": steps,
    }


def check_after_kill(run: Path) -> str | None:
    """The newest checkpoint (if any) loads and names the step it holds; else the problem."""
    latest = latest_checkpoint(run / "checkpoints")
    if latest is None:
        return None
    parts = load_checkpoint(latest)
    if parts["trainer"]["step"] != int(latest.name.split("_")[1]):
        return f"{latest} holds step {parts['trainer']['step']}"
    return None


def _reference_run(setup: Setup, steps: int) -> tuple[Path, dict[str, float]]:
    """An unkilled run, timed: seconds to its first checkpoint and in total."""
    reference = setup.work / "soak_reference"
    timing = reference / "timing.json"
    if not timing.is_file():
        shutil.rmtree(reference, ignore_errors=True)
        started = time.monotonic()
        proc = _train(setup, reference, steps)
        first = None
        while proc.poll() is None:
            if first is None and (reference / "checkpoints" / "LATEST").is_file():
                first = time.monotonic() - started
            time.sleep(0.05)
        if proc.returncode != 0 or first is None:
            raise SystemExit("the uninterrupted reference run failed")
        wall = time.monotonic() - started
        timing.write_text(json.dumps({"first_checkpoint_s": first, "wall_s": wall}))
    return reference, json.loads(timing.read_text())


def _pointer(run: Path) -> str:
    latest = run / "checkpoints" / "LATEST"
    return latest.read_text() if latest.is_file() else ""


def _wait(proc: subprocess.Popen[str], seconds: float | None, until: Any = None) -> bool:
    """Sleep up to `seconds` (forever if None) or until `until()`; False if `proc` ended."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while proc.poll() is None:
        if (until is not None and until()) or (deadline and time.monotonic() >= deadline):
            return True
        time.sleep(0.002)
    return False


def _kill_at_random_moment(
    proc: subprocess.Popen[str], run: Path, rng: random.Random, step_s: float
) -> bool:
    """One kill in five lands in start-up (model loading, evaluation), one in five inside the
    next checkpoint write, the rest at a uniform moment of the step after the next checkpoint
    (rollout, update, metrics). False when the run finished first."""
    where = rng.random()
    if where < 0.2:
        alive = _wait(proc, rng.uniform(0.5, 5.0))
    elif where < 0.4:
        mine = f".tmp_*_{proc.pid}"  # not a partial write a killed process left behind
        alive = _wait(proc, None, until=lambda: any((run / "checkpoints").glob(mine)))
    else:
        before = _pointer(run)
        alive = _wait(proc, None, until=lambda: _pointer(run) != before)
        alive = alive and _wait(proc, rng.uniform(0.0, 1.2 * step_s))
    if alive:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return alive


def soak(setup: Setup, kills: int, steps: int, seed: int) -> dict[str, Any]:
    """SIGKILL `searchrl train` at random moments, resume, compare with an unkilled run."""
    reference, timing = _reference_run(setup, steps)
    step_s = (timing["wall_s"] - timing["first_checkpoint_s"]) / max(steps - 1, 1)
    checkpoint = max(_bytes(p) for p in (reference / "checkpoints").glob("step_*"))
    bound = _bytes(reference) + checkpoint
    run = setup.work / "soak_run"
    shutil.rmtree(run, ignore_errors=True)
    rng = random.Random(seed)
    killed, runs, problems, largest, resumed, in_save = 0, 0, [], 0, [], 0
    with progress_bar("soak: kills", kills, unit="kills") as advance:
        while True:
            runs += 1
            proc = _train(setup, run, steps)
            if killed < kills and _kill_at_random_moment(proc, run, rng, step_s):
                killed += 1
                advance(1)
                largest = max(largest, _bytes(run))
                problems += [p for p in [check_after_kill(run)] if p]
                in_save += any((run / "checkpoints").glob(".tmp_*"))
                latest = latest_checkpoint(run / "checkpoints")
                resumed.append(int(latest.name.split("_")[1]) if latest else 0)
                continue
            if proc.wait() != 0:
                problems.append(f"run {runs} exited {proc.returncode}; see {run}.log")
            break
    same = fingerprint(run) == fingerprint(reference)
    return {"kills": killed, "runs": runs, "steps": steps, "bit_identical": same,
            "problems": problems, "max_bytes": largest, "bound_bytes": bound,
            "resumed_from_steps": resumed, "kills_during_a_save": in_save,
            "reference_bytes": _bytes(reference)}  # fmt: skip


class _Counter(logging.Handler):
    """Counts the remote client's log lines (one per failed attempt, one per give-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _counted(logger: str) -> _Counter:
    counter = _Counter()
    logging.getLogger(logger).addHandler(counter)
    return counter


def retrieval_outage(setup: Setup, down_s: float, retries: int | None) -> dict[str, Any]:
    """Kill the retrieval server during training, restart it `down_s` later; `retries` None
    keeps the client's default retries and backoff."""
    retries = RemoteConfig().retries if retries is None else retries
    out = setup.work / f"outage_r{retries}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    server = ServerProcess(setup.index, free_port(), out / "server.log")
    server.start()
    trainer = searching_trainer(setup, out, [
        "data.retriever=remote", f"data.remote.url={server.url}", f"data.remote.retries={retries}",
        "data.remote.timeout_s=5"])  # fmt: skip
    counter = _counted("searchrl.retrieval.remote")
    try:
        with outage(server, after_s=2.0, down_s=down_s) as times:
            rows = steps_until(trainer, lambda: "restarted" in times, limit=10_000)
        rows += steps_until(trainer, lambda: False, limit=2)
    finally:
        logging.getLogger("searchrl.retrieval.remote").removeHandler(counter)
        server.kill()
    dropped = sum(r["metrics"].get("train/dropped_failed", 0.0) for r in rows)
    return {"down_s": down_s, "retries": retries, "steps": len(rows),
            "trajectories": sum(r["trajectories"] for r in rows),
            "failed": sum(r["failed"] for r in rows),
            "steps_with_failures": sum(r["failed"] > 0 for r in rows),
            "log_lines": len(counter.lines), "excluded_from_update": int(dropped)}  # fmt: skip


def flaky(setup: Setup, mode: str, slow_s: float, steps: int) -> dict[str, Any]:
    """Every second request misbehaves (`mode`); the client retries within its bound."""
    out = setup.work / f"flaky_{mode}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    timeout, retries, backoff = 2.0, 3, 0.2
    counter = _counted("searchrl.retrieval.remote")
    try:
        with flaky_server(setup.index, mode, slow_s) as (url, stats):
            trainer = searching_trainer(setup, out, [
                "data.retriever=remote", f"data.remote.url={url}",
                f"data.remote.timeout_s={timeout}", f"data.remote.retries={retries}",
                f"data.remote.backoff_s={backoff}"])  # fmt: skip
            rows = steps_until(trainer, lambda: False, limit=steps)
    finally:
        logging.getLogger("searchrl.retrieval.remote").removeHandler(counter)
    bound = (retries + 1) * timeout + backoff * (2**retries - 1)
    return {"mode": mode, "steps": len(rows), "requests": stats["requests"],
            "faults": stats["faults"], "failed": sum(r["failed"] for r in rows),
            "trajectories": sum(r["trajectories"] for r in rows),
            "log_lines": len(counter.lines),
            "max_wait_s": round(max(r["retrieval_s"] for r in rows), 2),
            "bound_s": bound}  # fmt: skip


def disk_full(setup: Setup) -> dict[str, Any]:
    """Train into a tmpfs that holds one checkpoint but not two."""
    reference = setup.work / "soak_reference" / "checkpoints"
    checkpoint = max(_bytes(p) for p in reference.glob("step_*"))
    mount = setup.work / "tmpfs"
    mount.mkdir(exist_ok=True)
    size = int(checkpoint * 1.5) + 4 * 1024 * 1024
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                             capture_output=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        return {"skipped": "cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)"}
    try:
        proc = searchrl("train", "--config", "tiny_cpu_grpo", "--out", str(mount / "run"),
                        *train_overrides(setup, 4))  # fmt: skip
        _, err = proc.communicate()
        lines = err.strip().splitlines()
        latest = latest_checkpoint(mount / "run" / "checkpoints")
        loadable = latest is not None and check_after_kill(mount / "run") is None
        leftovers = [p.name for p in (mount / "run" / "checkpoints").glob(".tmp_*")]
        return {"exit_code": proc.returncode, "last_line": lines[-1] if lines else "",
                "traceback": "Traceback" in err, "previous": latest.name if latest else None,
                "previous_loadable": loadable, "leftovers": leftovers,
                "tmpfs_bytes": size}  # fmt: skip
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown rows: fault, what was injected, what survived, what was lost."""
    lines = ["| fault | injected | survived | trajectories lost | checks |",
             "|---|---|---|---:|---|"]  # fmt: skip
    for name, r in results.items():
        if "skipped" in r:
            lines.append(f"| {name} | — | skipped: {r['skipped']} | — | — |")
        elif name == "soak":
            lines.append(
                f"| training SIGKILLed at random moments | {r['kills']} kills | {r['runs']} runs, "
                f"{r['steps']} steps, resumed from steps {r['resumed_from_steps']} "
                f"({r['kills_during_a_save']} kills inside a checkpoint write), bit-identical "
                f"to an unkilled run: {r['bit_identical']} | 0 "
                f"| checkpoint problems: {len(r['problems'])}; disk max "
                f"{r['max_bytes'] / 1e6:.0f} MB ≤ bound {r['bound_bytes'] / 1e6:.0f} MB |"
            )
        elif name.startswith("outage"):
            lines.append(
                f"| retrieval server killed, back after {r['down_s']:.0f} s (retries "
                f"{r['retries']}) | 1 outage | {r['steps']}/{r['steps']} steps | {r['failed']} of "
                f"{r['trajectories']} ({r['steps_with_failures']} steps) | {r['log_lines']} "
                f"log lines; left out of the update: {r['excluded_from_update']} |"
            )
        elif name == "disk_full":
            lines.append(
                f"| disk full while saving | tmpfs {r['tmpfs_bytes'] / 1e6:.0f} MB | exit "
                f"{r['exit_code']}, `{r['last_line']}` | 0 | {r['previous']} loadable: "
                f"{r['previous_loadable']}; partial left: {len(r['leftovers'])}; traceback: "
                f"{r['traceback']} |"
            )
        else:
            lines.append(
                f"| retrieval {r['mode']} on every 2nd request | {r['faults']} of "
                f"{r['requests']} requests | {r['steps']}/{r['steps']} steps | {r['failed']} of "
                f"{r['trajectories']} | {r['log_lines']} log lines; longest wait "
                f"{r['max_wait_s']} s ≤ bound {r['bound_s']} s |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/faults"))
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40, help="steps of the soak run")
    parser.add_argument("--outage-s", type=float, default=10.0)
    parser.add_argument("--slow-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--fresh", action="store_true", help="rerun finished scenarios")
    args = parser.parse_args()
    setup = prepare(args.work)
    scenarios = {
        "soak": lambda: soak(setup, args.kills, args.steps, args.seed),
        "outage_default": lambda: retrieval_outage(setup, args.outage_s, retries=None),
        "outage_short": lambda: retrieval_outage(setup, args.outage_s, retries=3),
        "slow": lambda: flaky(setup, "slow", args.slow_s, steps=3),
        "http500": lambda: flaky(setup, "http500", args.slow_s, steps=3),
        "garbage": lambda: flaky(setup, "garbage", args.slow_s, steps=3),
        "disk_full": lambda: disk_full(setup),
    }
    chosen = [s for s in scenarios if not args.only or s in args.only.split(",")]
    results_dir = args.work / "results"
    results_dir.mkdir(exist_ok=True)
    results = {}
    with progress_bar("fault scenarios", len(chosen), unit="scenarios") as advance:
        for name in chosen:
            saved = results_dir / f"{name}.json"
            if args.fresh or not saved.is_file():
                saved.write_text(json.dumps(scenarios[name](), indent=2) + "\n")
            results[name] = json.loads(saved.read_text())
            advance(1)
    print(table(results))


if __name__ == "__main__":
    main()
