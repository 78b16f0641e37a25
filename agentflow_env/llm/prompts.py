"""The answer judge's prompt and the tolerant reader of its verdict, and the chat-message shape
every prompt uses.

The judge follows AgentFlow's answer judging. The reader accepts markdown decoration and
surrounding prose and scans with bounded patterns. The frozen modules' prompts are in
``agentflow_env.modules.prompts``.
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
