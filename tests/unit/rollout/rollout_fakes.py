"""Fakes for the rollout tests: a backend that writes scripted text as real token ids (also
behind a streaming engine's `submit`/`collect`), and an in-memory retriever that can be told
to fail."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from transformers import PreTrainedTokenizerBase

from searchrl.models.generation import Generation, SamplingParams
from searchrl.retrieval.base import RetrievalError
from searchrl.types import Document, Hit


class ScriptedBackend:
    """Writes `script(context_text, turn_index)` as this turn's output, tokenized with the real
    tokenizer, then applies the backend contract: cut at the first token completing a stop
    string, or at `max_new_tokens`. Keeps every generation so tests can compare the trajectory
    mask with what was generated."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, script: Callable[[str], str]):
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[list[Generation]] = []

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        outputs = [self._one(list(p), sp) for p, sp in zip(prompts, params, strict=True)]
        self.calls.append(outputs)
        return outputs

    def _one(self, prompt: list[int], params: SamplingParams) -> Generation:
        context = self.tokenizer.decode(prompt)
        ids = self.tokenizer.encode(self.script(context), add_special_tokens=False)
        for n in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:n])
            if n > params.max_new_tokens:
                break
            stop = next((s for s in params.stop if s in text), None)
            if stop is not None:
                return Generation(ids[:n], [0.0] * n, text, "stop", stop)
            if ids[n - 1] == self.tokenizer.eos_token_id:
                return Generation(ids[:n], [0.0] * n, text, "eos")
        kept = ids[: params.max_new_tokens]
        return Generation(kept, [0.0] * len(kept), self.tokenizer.decode(kept), "length")

    @property
    def generated(self) -> list[Generation]:
        return [g for call in self.calls for g in call]


class StreamingBackend(ScriptedBackend):
    """The scripted backend behind `submit`/`collect`: each `collect` finishes one row, the
    one with the shortest output first (as an engine finishes short turns first)."""

    streams = True

    def __init__(self, tokenizer, script) -> None:  # type: ignore[no-untyped-def]
        super().__init__(tokenizer, script)
        self.pending: dict[str, Generation] = {}
        self.largest_flight = 0

    def submit(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list:
        keys = []
        for prompt, p in zip(prompts, params, strict=True):
            keys.append(f"k{len(self.generated) + len(self.pending)}-{len(keys)}")
            self.pending[keys[-1]] = self._one(list(prompt), p)
        self.largest_flight = max(self.largest_flight, len(self.pending))
        return keys

    def collect(self) -> list[tuple[str, Generation]]:
        key = min(self.pending, key=lambda k: len(self.pending[k].token_ids))
        out = self.pending.pop(key)
        self.calls.append([out])
        return [(key, out)]


class DictRetriever:
    """Returns documents whose contents share the most words with the query; records calls."""

    def __init__(self, docs: Sequence[Document], fail: bool = False):
        self.docs = list(docs)
        self.fail = fail
        self.calls: list[list[str]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        if self.fail:
            raise RetrievalError("server down after 3 retries")
        results = []
        for query in queries:
            words = set(re.findall(r"\w+", query.lower()))
            scored = [
                (len(words & set(re.findall(r"\w+", d.contents.lower()))), d) for d in self.docs
            ]
            scored.sort(key=lambda item: -item[0])
            results.append([Hit(d, float(s)) for s, d in scored[:k]])
        return results
