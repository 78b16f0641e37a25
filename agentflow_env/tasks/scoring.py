"""Answer scoring in the SQuAD / Search-R1 style: exact match and token F1 over gold aliases."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["exact_match", "f1_score", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, and collapse whitespace."""
    text = s.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold alias, else 0.0.

    A missing prediction, or one that normalises to nothing, scores 0.
    """
    if prediction is None:
        return 0.0
    predicted = normalize_answer(prediction)
    if not predicted:
        return 0.0
    return float(any(predicted == normalize_answer(gold) for gold in _aliases(gold_answers)))


def f1_score(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """The best token-level F1 between the normalised prediction and any gold alias."""
    if prediction is None:
        return 0.0
    predicted_tokens = normalize_answer(prediction).split()
    if not predicted_tokens:
        return 0.0
    return max((_token_f1(predicted_tokens, g) for g in _aliases(gold_answers)), default=0.0)


def _aliases(gold_answers: Sequence[str]) -> Sequence[str]:
    """A bare string is one alias, not a sequence of one-letter aliases."""
    return [gold_answers] if isinstance(gold_answers, str) else gold_answers


def _token_f1(predicted_tokens: list[str], gold: str) -> float:
    gold_tokens = normalize_answer(gold).split()
    common = Counter(predicted_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)
