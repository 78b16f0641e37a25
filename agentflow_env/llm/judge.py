"""``LLMJudge``: AgentFlow-style answer judging for ``reward="llm_judge"``."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from agentflow_env.llm.client import ChatBackend, LLMEndpoint, LLMError, as_backend
from agentflow_env.llm.prompts import (
    Message,
    choice_messages,
    judge_messages,
    parse_choice,
    parse_judgement,
)

__all__ = [
    "CHOICE_FALLBACKS",
    "ChoiceFallback",
    "ChoiceScore",
    "LLMJudge",
    "gold_letter",
    "lettered_options",
]

ChoiceFallback = Literal["agentflow", "none"]
"""What a multiple-choice answer that names no option counts as: ``"agentflow"``, the first
listed option (as AgentFlow's scoring script maps it); ``"none"``, no option (it scores 0)."""
CHOICE_FALLBACKS: tuple[str, ...] = ("agentflow", "none")


class ChoiceScore(float):
    """A judge's score that the choice fallback decided; ``without_fallback``: the score the
    answer gets without it (0: it named no option)."""

    without_fallback: float

    def __new__(cls, score: float, without_fallback: float = 0.0) -> ChoiceScore:
        value = super().__new__(cls, score)
        value.without_fallback = float(without_fallback)
        return value


T = TypeVar("T")

_LETTERED = re.compile(r"^\s*\(?([A-Za-z])\s*[.):]\s*(.*?)\s*$", re.DOTALL)
_BARE_LETTER = re.compile(r"^\(?([A-Za-z])\)?[.):]?$")


class LLMJudge:
    """Asks a model whether the answer matches a gold answer; 1.0 for True, 0.0 for False.

    The model writes a short analysis and ends with ``Verdict: True|False`` (an AgentFlow
    ``<true_false>`` tag is read too). A reply without a verdict is asked again up to
    ``verdict_retries`` times, then raises ``LLMError`` (the session scores that as 0.0 and
    records the error). A missing answer scores 0.0 without a call.

    With ``options`` (a multiple-choice question's listed options, as AgentFlow scores GPQA and
    MedQA), the judge first asks which option the answer picks, then compares that option with
    the gold answer: directly when the gold names one option (its letter, its text, or the whole
    line), else by asking for a verdict on the picked option. An answer that is exactly one
    option's letter or text needs no call to be read; one that picks no option scores 0.0,
    unless ``choice_fallback="agentflow"``: then it counts as the first listed option, as in
    AgentFlow's scoring script (an empty answer too), and the score is a ``ChoiceScore`` that
    also says what it would be without the fallback.
    """

    def __init__(
        self,
        backend: LLMEndpoint | ChatBackend,
        verdict_retries: int = 1,
        choice_fallback: ChoiceFallback | None = None,
    ) -> None:
        if choice_fallback not in (None, *CHOICE_FALLBACKS):
            raise ValueError(
                f"choice_fallback must be one of {list(CHOICE_FALLBACKS)} or None, "
                f"got {choice_fallback!r:.40}"
            )
        self.backend = as_backend(backend)
        self.verdict_retries = verdict_retries
        self.choice_fallback = choice_fallback

    async def judge(
        self,
        question: str,
        answer: str | None,
        gold_answers: Sequence[str],
        *,
        options: Sequence[str] = (),
    ) -> float:
        lettered = lettered_options(options)
        fallback = self.choice_fallback == "agentflow" and len(lettered) >= 2
        if answer is None or (not answer.strip() and not fallback):
            return 0.0
        if len(lettered) >= 2:
            return await self._judge_choice(question, answer, gold_answers, lettered)
        return await self._verdict(question, answer, gold_answers)

    async def _verdict(self, question: str, answer: str, gold_answers: Sequence[str]) -> float:
        verdict = await self._ask(
            judge_messages(question, answer, gold_answers), parse_judgement, "True/False verdict"
        )
        return 1.0 if verdict else 0.0

    async def _judge_choice(
        self,
        question: str,
        answer: str,
        gold_answers: Sequence[str],
        options: Sequence[tuple[str, str]],
    ) -> float:
        letters = [letter for letter, _ in options]
        picked = _letter_of(answer, options) if answer.strip() else ""
        if picked is None:
            messages = choice_messages(question, answer, options)
            picked = await self._ask(
                messages, lambda text: parse_choice(text, letters), "Choice: letter or none"
            )
        if not picked:
            if self.choice_fallback != "agentflow":
                return 0.0
            first = await self._option_score(question, gold_answers, options, letters[0])
            return ChoiceScore(first, without_fallback=0.0)
        return await self._option_score(question, gold_answers, options, picked)

    async def _option_score(
        self,
        question: str,
        gold_answers: Sequence[str],
        options: Sequence[tuple[str, str]],
        picked: str,
    ) -> float:
        """The score of the option ``picked``: by the gold's letter where the gold names one
        option, else by a verdict on the option."""
        gold = gold_letter(gold_answers, options)
        if gold is not None:
            return 1.0 if picked == gold else 0.0
        text = dict(options)[picked]
        return await self._verdict(question, f"{picked}. {text}", gold_answers)

    async def _ask(
        self, messages: list[Message], parse: Callable[[str], T | None], wanted: str
    ) -> T:
        """The first parsable reply to ``messages``, asked up to ``verdict_retries`` more times."""
        replies = []
        for _ in range(self.verdict_retries + 1):
            reply = await self.backend.chat(messages)
            parsed = parse(reply.text)
            if parsed is not None:
                return parsed
            replies.append(reply.text[-200:])
        raise LLMError(f"the judge gave no {wanted}; last reply ends: {replies[-1]!r}")


def lettered_options(options: Sequence[str]) -> list[tuple[str, str]]:
    """``(letter, text)`` for each option: its own letter where every option starts with a
    distinct one (``"A. 0.9"``, ``"(b) text"``), else A, B, C... in order; blank options are
    dropped, and more options than letters give none (not a multiple-choice question)."""
    items = [str(option).strip() for option in options if str(option).strip()]
    if len(items) > 26:
        return []
    matches = [_LETTERED.match(item) for item in items]
    own = [m.group(1).upper() for m in matches if m is not None and m.group(2)]
    if len(own) == len(items) and len(set(own)) == len(own):
        return [(letter, m.group(2)) for letter, m in zip(own, matches, strict=True) if m]
    return [(chr(ord("A") + index), item) for index, item in enumerate(items)]


def gold_letter(gold_answers: Sequence[str], options: Sequence[tuple[str, str]]) -> str | None:
    """The one option the gold answers name (by letter, text, or ``"X. text"``), else ``None``
    (they name none, or several)."""
    named = {letter for gold in gold_answers if (letter := _letter_of(gold, options))}
    return named.pop() if len(named) == 1 else None


def _letter_of(text: str, options: Sequence[tuple[str, str]]) -> str | None:
    """The option ``text`` is exactly (its letter, its text or its whole line), else ``None``."""
    letters = {letter for letter, _ in options}
    bare = _BARE_LETTER.match(text.strip())
    if bare is not None and bare.group(1).upper() in letters:
        return bare.group(1).upper()
    wanted = _plain(text)
    found = {
        letter
        for letter, option in options
        if wanted in (_plain(option), _plain(f"{letter}. {option}"))
    }
    return found.pop() if len(found) == 1 else None


def _plain(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".")
