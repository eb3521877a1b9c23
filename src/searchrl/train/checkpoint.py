"""Checkpoints that resume exactly and survive a kill mid-write.

A checkpoint is a directory `step_NNNNNN/` holding one `.pt` file per part (trainable weights,
optimizer, scheduler, RNG states, data position, step). It is written into a hidden temporary
directory and renamed into place only when complete; `LATEST` is then replaced atomically.
A crash at any point leaves the previous checkpoint intact and `LATEST` pointing at it.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from searchrl.utils.errors import SearchRLError

LATEST = "LATEST"
LOW_DISK_BYTES = 64 * 1024 * 1024


def step_dir(root: Path, step: int) -> Path:
    """Where the checkpoint of `step` lives."""
    return root / f"step_{step:06d}"


class CheckpointError(SearchRLError):
    """A checkpoint could not be written (disk full, read-only disk); the previous one is
    untouched and still named by `LATEST`."""


def save_checkpoint(root: Path, step: int, parts: dict[str, Any], keep: int) -> Path:
    """Write `parts` (name → picklable state) as checkpoint `step`; keep the newest `keep`.
    If writing fails, the partial copy is deleted (freeing what it took) and a
    CheckpointError says so in one line."""
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, step)
    tmp = root / f".tmp_{final.name}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        for name, state in parts.items():
            torch.save(state, tmp / f"{name}.pt")
    except (OSError, RuntimeError) as err:  # torch.save reports a full disk as RuntimeError
        full = _disk_full(err, root)
        shutil.rmtree(tmp, ignore_errors=True)
        previous = latest_checkpoint(root)
        kept = f"{previous.name} is intact" if previous else "there is no earlier checkpoint"
        reason = "no space left on device" if full else " ".join(str(err).split())
        raise CheckpointError(
            f"could not save checkpoint {final.name} in {root}: {reason}; {kept}"
        ) from err
    publish(root, tmp, final, keep)
    return final


def _disk_full(err: BaseException, root: Path) -> bool:
    """torch.save's writer reports a full disk as an opaque RuntimeError ("unexpected pos"),
    so besides ENOSPC, a failure with under 64 MiB left on the device counts as a full disk."""
    if getattr(err, "errno", None) == errno.ENOSPC:
        return True
    return shutil.disk_usage(root).free < LOW_DISK_BYTES


def _complete_steps(root: Path) -> list[Path]:
    """Finished checkpoint directories, oldest first (temporaries are hidden and skipped)."""
    return sorted(p for p in root.glob("step_*") if p.is_dir())


def publish(root: Path, tmp: Path, final: Path, keep: int) -> None:
    """Rename the complete checkpoint `tmp` into place as `final`, point `LATEST` at it and
    keep the newest `keep`. The older ones that must go are hidden *before* the new one
    appears, so a kill at any moment shows at most `keep` checkpoints (with keep=1 there is
    a moment with two: never zero), and `LATEST` names a complete one throughout."""
    if keep > 1:
        _hide(root, keep - 1)
    if final.exists():  # a rerun of this step after a resume: hide the old copy, then drop it
        _hide_one(root, final)
    os.replace(tmp, final)
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / LATEST)
    prune(root, keep)


def prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints. Each older one is first renamed out of sight (one
    atomic rename) and only then deleted: deleting in place takes long enough for a kill to
    land mid-way and leave a visible `step_*` folder with half its files, which would count
    as a checkpoint; a kill now leaves at most a hidden `.trash_*`, removed by the next prune."""
    _hide(root, keep)
    for stale in [*root.glob(".trash_step_*"), *root.glob(".tmp_step_*")]:
        shutil.rmtree(stale, ignore_errors=True)


def _hide(root: Path, keep: int) -> None:
    """Rename all but the newest `keep` checkpoints out of sight (keep=0 keeps them all)."""
    for old in _complete_steps(root)[:-keep] if keep > 0 else []:
        _hide_one(root, old)


def _hide_one(root: Path, old: Path) -> None:
    trash = root / f".trash_{old.name}"
    shutil.rmtree(trash, ignore_errors=True)  # a leftover of the same name blocks the rename
    os.replace(old, trash)


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint `LATEST` names, else the newest complete one, else None."""
    pointer = root / LATEST
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        if named.is_dir():
            return named
    steps = _complete_steps(root) if root.is_dir() else []
    return steps[-1] if steps else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """All parts of a checkpoint directory, by name (loaded onto the CPU)."""
    return {
        p.stem: torch.load(p, map_location="cpu", weights_only=False)
        for p in sorted(path.glob("*.pt"))
    }


def rng_state() -> dict[str, Any]:
    """Every RNG the trainer draws from, so a resumed run continues the same streams."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Only the parameters that change (all weights, or just LoRA adapters), plus buffers
    are not needed: frozen weights are reloaded from the model source on resume."""
    return {n: p.detach().cpu().clone() for n, p in module.named_parameters() if p.requires_grad}


def load_trainable(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy saved trainable parameters back in place; a missing or extra name is an error."""
    params = dict(module.named_parameters())
    missing = {n for n, p in params.items() if p.requires_grad} - set(state)
    unknown = set(state) - set(params)
    if missing or unknown:
        raise KeyError(f"checkpoint mismatch: missing {sorted(missing)}, unknown {sorted(unknown)}")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
