"""How many golden answers occur in a corpus: an upper bound on answerability.

Scanning a 20 MB corpus once per answer (`answer in corpus`) costs ~10 ms each, about ten
minutes for the ~50k distinct answers of the seven benchmarks. Instead the corpus is indexed
by word (word → passages), and each answer is checked only against the passages that hold a
word it must contain. An inner word of the answer (with non-word characters on both sides)
must appear as a whole corpus word; the first and last words of a substring match may be cut,
so they are matched against corpus words by suffix or prefix, by bisection in sorted lists.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

_WORD = re.compile(r"\w+")


class CorpusIndex:
    """Lower-cased passages with a word → passages index, for substring and whole-word
    answer lookups (both case-insensitive)."""

    def __init__(self, passages: Iterable[str]) -> None:
        self._texts = [p.lower() for p in passages]
        postings: dict[str, list[int]] = {}
        for i, text in enumerate(self._texts):
            for word in set(_WORD.findall(text)):
                postings.setdefault(word, []).append(i)
        self._postings = postings
        self._sorted = sorted(postings)
        self._reversed = sorted(w[::-1] for w in postings)
        self._suffixes: list[str] | None = None

    def __len__(self) -> int:
        return len(self._texts)

    def _starting_with(self, prefix: str) -> list[str]:
        start = bisect.bisect_left(self._sorted, prefix)
        end = bisect.bisect_left(self._sorted, prefix + "\U0010ffff")
        return self._sorted[start:end]

    def _ending_with(self, suffix: str) -> list[str]:
        rev = suffix[::-1]
        start = bisect.bisect_left(self._reversed, rev)
        end = bisect.bisect_left(self._reversed, rev + "\U0010ffff")
        return [w[::-1] for w in self._reversed[start:end]]

    def _inside_some_word(self, run: str) -> bool:
        """Whether any corpus word contains `run` (a sorted list of all word suffixes,
        built on first use)."""
        if self._suffixes is None:
            self._suffixes = sorted({w[i:] for w in self._postings for i in range(len(w))})
        i = bisect.bisect_left(self._suffixes, run)
        return i < len(self._suffixes) and self._suffixes[i].startswith(run)

    def _passages(self, words: Iterable[str]) -> set[int]:
        found: set[int] = set()
        for word in words:
            found.update(self._postings.get(word, ()))
        return found

    def contains_whole_word(self, answer: str) -> bool:
        """`answer` occurs with no word character right before or after it."""
        answer = answer.lower().strip()
        if not answer:
            return False
        pattern = re.compile(r"(?<!\w)" + re.escape(answer) + r"(?!\w)")
        texts = self._texts
        words = _WORD.findall(answer)
        if not words:
            return any(pattern.search(t) for t in texts)
        if any(w not in self._postings for w in words):
            return False
        rarest = min(words, key=lambda w: len(self._postings[w]))
        # `in` is a fast filter; the regex only confirms the boundaries.
        return any(answer in texts[i] and pattern.search(texts[i]) for i in self._postings[rarest])

    def contains_substring(self, answer: str) -> bool:
        """`answer` occurs anywhere, even inside longer words."""
        answer = answer.lower().strip()
        if not answer:
            return False
        runs = list(_WORD.finditer(answer))
        if not runs:
            return any(answer in t for t in self._texts)
        if len(runs) == 1 and runs[0].span() == (0, len(answer)):
            return self._inside_some_word(answer)
        return any(answer in self._texts[i] for i in self._candidates(answer, runs))

    def _candidates(self, answer: str, runs: list[re.Match[str]]) -> set[int]:
        """Passages holding the most selective word the answer needs: an inner word exactly
        (non-word characters on both sides), or a cut first/last word by suffix/prefix."""
        options: list[list[str]] = []
        for run in runs:
            if run.start() > 0 and run.end() < len(answer):
                options.append([run.group()])
            elif run.start() == 0:
                options.append(self._ending_with(run.group()))
            else:
                options.append(self._starting_with(run.group()))
        cheapest = min(options, key=lambda ws: sum(len(self._postings.get(w, ())) for w in ws))
        return self._passages(cheapest)
