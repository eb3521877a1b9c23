"""Answer metrics shared by training rewards and evaluation, so the two cannot drift.

SQuAD-style normalization (lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace), as Search-R1 and FlashRAG use it. Every metric takes the best score over the list
of golden answers.

Two edge cases are settled here rather than copied: a golden answer that normalizes to nothing
(e.g. "The") no longer counts as contained in every prediction for SubEM, and for F1 two empty
token lists agree (SQuAD v2), so EM = 1 always implies F1 = 1 and SubEM = 1.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
# The body may not contain another opening tag, so "<answer> a <answer> b </answer>" gives "b".
_ANSWER = re.compile(r"<answer>((?:(?!<answer>).)*?)</answer>", re.DOTALL)
# HotpotQA/FlashRAG F1: a yes/no/noanswer on either side scores only if both sides agree exactly.
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Lower-case, strip punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(golden_answers: str | Sequence[str]) -> list[str]:
    return [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)


def exact_match(prediction: str | None, golden_answers: str | Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(golden_answers)))


def sub_exact_match(prediction: str | None, golden_answers: str | Sequence[str]) -> float:
    """1.0 if any normalized gold answer is contained in the normalized prediction (an empty
    normalized gold is contained only in an empty prediction)."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    golds = (normalize_answer(g) for g in _golds(golden_answers))
    return float(any(g in pred if g else pred == g for g in golds))


def _f1(pred: str, gold: str) -> float:
    """Token F1 of two normalized strings."""
    if pred != gold and (pred in _CLOSED_ANSWERS or gold in _CLOSED_ANSWERS):
        return 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golden_answers: str | Sequence[str]) -> float:
    """Token-level F1 between normalized prediction and the best-matching gold answer."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return max((_f1(pred, normalize_answer(g)) for g in _golds(golden_answers)), default=0.0)


def extract_answer(response: str) -> str | None:
    """Text of the last `<answer>…</answer>` block of a *response* (never pass the prompt:
    the Search-R1 prompt itself contains `<answer> Beijing </answer>`)."""
    matches = _ANSWER.findall(response)
    return matches[-1].strip() if matches else None


def answer_metrics(prediction: str | None, golden_answers: Sequence[str]) -> dict[str, float]:
    """EM, F1 and SubEM of one prediction, the trio every trajectory file records."""
    return {
        "em": exact_match(prediction, golden_answers),
        "f1": f1_score(prediction, golden_answers),
        "subem": sub_exact_match(prediction, golden_answers),
    }
