"""Answer scoring in the SQuAD / Search-R1 style: exact match and token F1 over gold aliases.

Answers may come wrapped in ``<answer>...</answer>`` tags, the output form AgentFlow asks its
agents for; ``extract_tagged_answer`` pulls the tagged part out before scoring, and
``with_answer_tag_instruction`` adds the request for that form to a question.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = [
    "ANSWER_TAG_INSTRUCTION",
    "exact_match",
    "extract_tagged_answer",
    "f1_score",
    "normalize_answer",
    "with_answer_tag_instruction",
]

ANSWER_TAG_INSTRUCTION = (
    "Once you have the answer, write it between <answer> and </answer> tags, "
    "and write nothing after the </answer> tag."
)
"""What ``with_answer_tag_instruction`` appends to a question: the answer goes inside
``<answer>`` and ``</answer>`` tags, nothing after them."""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_OPEN_TAG = r"<\s*answer\s*>"
_CLOSE_TAG = r"<\s*/\s*answer\s*>"
# The text between an opening tag and the next closing tag, holding no further opening tag:
# in "<answer>a <answer>b</answer>" that is "b", the innermost, last-opened answer.
_TAGGED = re.compile(rf"{_OPEN_TAG}((?:(?!{_OPEN_TAG}).)*?){_CLOSE_TAG}", re.IGNORECASE | re.DOTALL)
_ASKS_FOR_TAGS = (re.compile(_OPEN_TAG, re.IGNORECASE), re.compile(_CLOSE_TAG, re.IGNORECASE))


def extract_tagged_answer(text: str | None) -> str | None:
    """The stripped content of the last ``<answer>...</answer>`` pair in ``text``.

    Tags match in any letter case (and with spaces inside the brackets). ``None`` when ``text``
    holds no complete pair; an empty pair gives ``""``.
    """
    if not text:
        return None
    matches = _TAGGED.findall(text)
    return matches[-1].strip() if matches else None


def with_answer_tag_instruction(question: str) -> str:
    """``question`` followed by ``ANSWER_TAG_INSTRUCTION``, unless it already names both the
    ``<answer>`` and ``</answer>`` tags (then it is returned unchanged)."""
    if all(tag.search(question) for tag in _ASKS_FOR_TAGS):
        return question
    return f"{question.rstrip()} {ANSWER_TAG_INSTRUCTION}"


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
