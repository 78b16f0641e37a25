"""Answer scoring as FlashRAG and Search-R1 score QA: exact match and token F1 over gold aliases.

Each choice, and which reference it follows, is in ``docs/scoring.md``: the normalisation is
SQuAD's (shared by both references); exact match is 1 when the normalised prediction equals any
normalised alias, even when both normalise to nothing (the band "The The" answered "the"), as
in both references; token F1 is FlashRAG's, including its rule that a yes/no/noanswer on either
side scores only when both sides are the same word.

Answers may come wrapped in ``<answer>...</answer>`` tags, the output form AgentFlow asks its
agents for; ``extract_tagged_answer`` pulls the tagged part out before scoring, and
``with_answer_tag_instruction`` adds the request for that form to a question.
``answer_options`` reads a multiple-choice record's listed options, which an answer judge
compares the chosen option against.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ANSWER_TAG_INSTRUCTION",
    "OPTION_KEYS",
    "YES_NO_ANSWERS",
    "answer_options",
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


OPTION_KEYS = ("choices", "options")
"""Where a record lists a multiple-choice question's options (GPQA's and MedQA's files in
AgentFlow's benchmark set), in the order they are looked for."""


def answer_options(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """A multiple-choice task's options from its metadata: the first of ``OPTION_KEYS`` holding
    a list of at least two strings (or the JSON text of one, as dataset records keep it);
    ``()`` for any other task."""
    for key in OPTION_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                value = json.loads(value)
            except ValueError:
                continue
        if (
            isinstance(value, list | tuple)
            and len(value) >= 2
            and all(isinstance(item, str) and item.strip() for item in value)
        ):
            return tuple(value)
    return ()


def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, and collapse whitespace."""
    text = s.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


YES_NO_ANSWERS = frozenset({"yes", "no", "noanswer"})
"""Normalised answers that F1 does not credit partially (FlashRAG's rule, from HotpotQA): an
F1 pair where one side is one of them scores only if both sides are that same word."""


def exact_match(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold alias, else 0.0.

    ``None`` (no answer at all) scores 0. A prediction that normalises to nothing matches a gold
    alias that does too (FlashRAG and Search-R1 both score ``"the"`` against ``["The The"]``
    as 1).
    """
    if prediction is None:
        return 0.0
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in _aliases(gold_answers)))


def f1_score(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """The best token-level F1 between the normalised prediction and any gold alias (FlashRAG's).

    A pair where either side is yes/no/noanswer (``YES_NO_ANSWERS``) and the sides differ scores
    0, and so does a pair sharing no token (two answers that both normalise to nothing
    included). ``None`` scores 0.
    """
    if prediction is None:
        return 0.0
    predicted = normalize_answer(prediction)
    return max((_pair_f1(predicted, gold) for gold in _aliases(gold_answers)), default=0.0)


def _aliases(gold_answers: Sequence[str]) -> Sequence[str]:
    """A bare string is one alias, not a sequence of one-letter aliases."""
    return [gold_answers] if isinstance(gold_answers, str) else gold_answers


def _pair_f1(predicted: str, gold: str) -> float:
    expected = normalize_answer(gold)
    if (predicted in YES_NO_ANSWERS or expected in YES_NO_ANSWERS) and predicted != expected:
        return 0.0
    predicted_tokens, gold_tokens = predicted.split(), expected.split()
    overlap = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)
