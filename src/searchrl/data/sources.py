"""The question sources `data.train_files` / `data.val_files` name, the way veRL and Search-R1
name theirs: a Search-R1 parquet, a FlashRAG JSONL, `hf:NAME:SPLIT`, or a synthetic world's
directory, each optionally cut to rows `a..b-1` with `PATH[a:b]`.

Several specs mix into one shuffled pool (the paper's NQ + HotpotQA). Every question keeps
its `"<source>:<id>"` uid, the GRPO group key, and a pool refuses two questions with one uid,
so two sources whose row indexes restart at 0 never share a group. Row cuts exist so a dev
split can be divided between training and evaluation in the config itself (e.g. NQ dev rows
1000 on for training, the first 100 for evaluation) and a test can check that the two never
meet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from searchrl.data.benchmarks import DataError, load_flashrag_jsonl, load_hf_dataset, load_questions
from searchrl.data.mix import mix_questions
from searchrl.types import Question

WORLD_SOURCE = "world"
"""The source name of a synthetic world's questions (their uids are `world:<id>`)."""
_ROWS = re.compile(r"^(?P<base>.+)\[(?P<start>\d*):(?P<stop>\d*)\]$")


@dataclass(frozen=True)
class Spec:
    """One parsed entry of `data.train_files` / `data.val_files`."""

    text: str
    """The entry as written."""
    base: str
    """The entry without its row cut: a path or `hf:NAME[:SPLIT]`."""
    start: int | None = None
    stop: int | None = None

    @property
    def hub(self) -> bool:
        """A FlashRAG set on the Hugging Face Hub (`hf:NAME[:SPLIT]`)."""
        return self.base.startswith("hf:")

    @property
    def path(self) -> Path:
        """The local file or world directory."""
        return Path(self.base)

    @property
    def world(self) -> bool:
        """A synthetic world's directory (`searchrl data world`, or a run's `world/`)."""
        return not self.hub and (self.path / "manifest.json").is_file()


def parse_spec(text: str) -> Spec:
    """`PATH`, `PATH[a:b]`, `hf:NAME:SPLIT` or `hf:NAME:SPLIT[a:b]`."""
    match = _ROWS.match(text.strip())
    if match is None:
        return Spec(text, text.strip())
    start, stop = match["start"], match["stop"]
    return Spec(text, match["base"], int(start) if start else None, int(stop) if stop else None)


def missing_input(specs: Sequence[str], key: str) -> str | None:
    """The first spec whose file or directory does not exist, as a one-line message naming
    it and `key` (None when all are there). Run before a model is loaded, so a preset that
    points at data not downloaded yet stops at once."""
    for spec in map(parse_spec, specs):
        if spec.hub:
            try:
                import datasets  # noqa: F401
            except ImportError:
                return (
                    f"{key}: {spec.base} needs the `datasets` package "
                    "(pip install 'searchrl[hf]'), or a local file"
                )
        elif not spec.path.exists():
            return f"{key}: {spec.base} not found"
    return None


def load_spec(spec: Spec, world_split: str) -> list[Question]:
    """The questions of one spec (a world's `world_split`), cut to its rows."""
    if spec.hub:
        name, _, split = spec.base[3:].partition(":")
        questions = load_hf_dataset(name, split or None)
    elif spec.world:
        questions = load_flashrag_jsonl(spec.path / f"{world_split}.jsonl", WORLD_SOURCE)
    elif spec.path.is_dir():
        raise DataError(f"{spec.base}: a directory that is not a world (no manifest.json)")
    else:
        questions = load_questions(spec.path)
    cut = questions[spec.start : spec.stop]
    if not cut:
        raise DataError(f"{spec.text}: no questions in rows {spec.start}..{spec.stop}")
    return cut


def load_sources(specs: Sequence[str], world_split: str, seed: int) -> list[Question]:
    """Every spec's questions pooled and shuffled with `seed` (one spec keeps its order);
    two questions with one uid are an error that names both."""
    groups = [load_spec(parse_spec(s), world_split) for s in specs]
    if len(groups) == 1:
        return groups[0]
    return mix_questions(groups, seed)
