"""The answer judge's prompts and the tolerant readers of its replies, and the chat-message
shape every prompt uses.

The judge follows AgentFlow's answer judging: a verdict on the answer against the gold answers,
and, for a multiple-choice question, first which listed option the answer picks. The readers
accept markdown decoration and surrounding prose and scan with bounded patterns. The frozen
modules' prompts are in ``agentflow_env.modules.prompts``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Message = dict[str, str]

# Each system prompt names its role in its first sentence; scripted test servers key on it.
JUDGE_SYSTEM = (
    "You are the answer judge: a precise evaluator who decides whether a model's response "
    "answers a question with the same answer as the labeled answer."
)

JUDGE_USER = """Determine whether the Model Response gives the same answer as the Labeled Answer.

Question: {question}
Model Response: {answer}
Labeled Answer: {gold}

Instructions:
1. Extract the core answer from the Model Response, ignoring explanations.
2. It is correct if it is equivalent to any labeled answer (same entity, number or meaning; \
formatting, capitalisation and minor wording do not matter).
3. It is incorrect if it differs, is missing, hedges between several answers or only partly \
matches.

Reply in this format:
Analysis: <brief analysis>
Verdict: True or False"""


def judge_messages(question: str, answer: str, gold_answers: Sequence[str]) -> list[Message]:
    gold = " | ".join(gold_answers) if gold_answers else "(none)"
    return chat_messages(
        JUDGE_SYSTEM, JUDGE_USER.format(question=question, answer=answer, gold=gold)
    )


CHOICE_SYSTEM = (
    "You are the answer judge: a careful reader who decides which option of a multiple-choice "
    "question a model's response settles on."
)

CHOICE_USER = """Which listed option does the Model Response choose as its final answer?

Question: {question}
Options:
{options}
Model Response: {answer}

Instructions:
1. Look for the response's final choice and ignore its reasoning.
2. A choice may be written as an option's letter, as its position (1 is the first option), as \
its text, or as a value that only one option holds.
3. The choice is none if the response picks no option or leaves several open.

Reply in this format:
Analysis: <brief analysis>
Choice: <the option's letter, or none>"""


def choice_messages(
    question: str, answer: str, options: Sequence[tuple[str, str]]
) -> list[Message]:
    """Asks which of ``options`` (``(letter, text)`` pairs) the answer picks."""
    listed = "\n".join(f"{letter}. {text}" for letter, text in options)
    return chat_messages(
        CHOICE_SYSTEM, CHOICE_USER.format(question=question, options=listed, answer=answer)
    )


_CHOICE = re.compile(r"choice\W{0,12}(none|[a-z])\b", re.IGNORECASE)


def parse_choice(text: str, letters: Sequence[str]) -> str | None:
    """The letter of the last ``Choice: X`` naming one of ``letters`` (upper case), ``""`` for
    ``Choice: none``, or ``None`` if the reply names neither."""
    known = {letter.upper() for letter in letters}
    for found in reversed(_CHOICE.findall(text)):
        value = found.upper()
        if value == "NONE":
            return ""
        if value in known:
            return value
    return None


def chat_messages(system: str, user: str) -> list[Message]:
    """A system message and a user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_TAG_VERDICT = re.compile(r"true[_ ]?false\W{0,12}(true|false)\b", re.IGNORECASE)
_NAMED_VERDICT = re.compile(
    r"(?:verdict|judg(?:e)?ment|conclusion|decision)\W{0,12}(true|false|correct|incorrect)\b",
    re.IGNORECASE,
)
_BARE_VERDICT = re.compile(r"^\W*(true|false|correct|incorrect)\W*$", re.IGNORECASE)


def parse_judgement(text: str) -> bool | None:
    """The judge's verdict: ``<true_false>`` tag, else the last ``Verdict: ...``, else a bare
    last line; ``None`` if it gave none."""
    for pattern in (_TAG_VERDICT, _NAMED_VERDICT):
        matches = pattern.findall(text)
        if matches:
            return matches[-1].lower() in ("true", "correct")
    for line in reversed(text.splitlines()):
        if line.strip():
            bare = _BARE_VERDICT.match(line)
            return None if bare is None else bare.group(1).lower() in ("true", "correct")
    return None
