"""Reading an answer out of gathered evidence: the task's own solver, or the gold-alias oracle.

The rule modules judge with ``evidence_reader(task)``, and the diagnostics ask the same reader,
through ``evidence_answers``, whether the evidence answered the question when a verifier said
STOP. What the oracle can and cannot measure: ``docs/scoring.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentflow_env.tasks.base import AnswerSolver, Evidence, Task
from agentflow_env.tasks.scoring import normalize_answer

__all__ = [
    "JUDGEMENT_ANSWERS",
    "MIN_FINDABLE_CHARS",
    "EvidenceAnswerSolver",
    "evidence_answers",
    "evidence_reader",
    "findable_in_text",
]

MIN_FINDABLE_CHARS = 3
"""A gold alias needs at least this many characters, spaces aside, once normalised, before the
oracle may look for it: a digit or a two-letter token turns up in passages on any subject."""

JUDGEMENT_ANSWERS = frozenset({"yes", "no", "true", "false", "noanswer"})
"""Normalised golds that judge the question rather than name something a passage states: a
passage holding the word "yes" does not say that the answer is yes."""

_COMMON_WORDS = frozenset(
    """
    i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves one ones
    what which who whom whose when where why how this that these those there here
    am is are was were be been being have has had having do does did doing done
    will would shall should can could may might must
    and but or nor if then else than because as until while so though although
    of at by for with about against between into through during before after above below to from
    up down in out on off over under again once
    all any both each few more most other some such not only own same too very just also now
    none nothing something everything
    zero two three four five six seven eight nine ten
    """.split()  # noqa: SIM905 - a word list reads better as text
)
"""Function words and small number words: found in almost every passage, whatever its subject."""


def findable_in_text(gold: str) -> bool:
    """Whether finding ``gold`` verbatim in a tool output is evidence that the output answers.

    Not for a gold that normalises to a judgement (``JUDGEMENT_ANSWERS``), to fewer than
    ``MIN_FINDABLE_CHARS`` characters (a digit, "UK", the band "The The"), or to common words
    only (a count like "two", the film "Up", the band "The Who"): each turns up in text that does
    not answer the question.
    """
    normalized = normalize_answer(gold)
    if len(normalized.replace(" ", "")) < MIN_FINDABLE_CHARS or normalized in JUDGEMENT_ANSWERS:
        return False
    return not all(token in _COMMON_WORDS for token in normalized.split())


def evidence_reader(task: Task) -> AnswerSolver:
    """``task.solver``, or for a task without one (a QA dataset) the gold-alias oracle."""
    return task.solver if task.solver is not None else EvidenceAnswerSolver(task.gold_answers)


def evidence_answers(task: Task, evidence: Sequence[Evidence]) -> bool | None:
    """Whether ``evidence`` answers ``task``'s question by its evidence reader; ``None`` when the
    reader cannot tell: the oracle of a task with no gold alias it may look for."""
    reader = evidence_reader(task)
    if isinstance(reader, EvidenceAnswerSolver) and not reader.measurable:
        return None
    return reader.solve(evidence) is not None


class EvidenceAnswerSolver:
    """For tasks with no program (real QA data): a gold alias found verbatim in a tool output.

    This is a retrieval oracle and it does compare with the gold answers: it only measures
    whether the planner retrieved answer-bearing text. It looks only for the aliases that
    ``findable_in_text`` accepts (``findable_answers``); a task with none (``measurable`` is
    False: every alias yes/no, very short or common words) is never answered. Use LLM modules to
    measure end-to-end answering on real datasets.
    """

    def __init__(self, gold_answers: tuple[str, ...]):
        self.gold_answers = tuple(a for a in gold_answers if a.strip())
        self.findable_answers = tuple(a for a in self.gold_answers if findable_in_text(a))
        self._patterns = tuple((f" {normalize_answer(a)} ", a) for a in self.findable_answers)

    @property
    def measurable(self) -> bool:
        """Whether the oracle can find any alias at all; if not, ``solve`` always says ``None``."""
        return bool(self._patterns)

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        if not self._patterns:
            return None
        for item in evidence:
            if not item.ok:
                continue
            text = f" {normalize_answer(item.output)} "
            for pattern, gold in self._patterns:
                if pattern in text:
                    return gold
        return None
