"""Reading computations out of Python and Calculator calls, for the code tasks' solvers.

A *computation* is one successful Python or Calculator call that printed a number; its result is
the last number it printed, so one call is one result (a call cannot spray guesses). A
computation *addresses* a task when its input (the code or the expression the planner sent)
writes every number the task is about: the question's parameters (``compute``) or the facts read
from retrieved text (``fact_math``).

The solvers built on this never see the gold answer and never check a result's value: the rule
verifier says STOP at the first computation that addresses the task, whatever it printed, and
the rule generalist answers with what it printed. Only the reward compares that answer with the
gold one, so a planner gets one scored answer per episode and the verifier's decision tells it
nothing about whether the number was right.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from agentflow_env.tasks.base import Evidence

PYTHON_TOOL = "Python"
CALCULATOR_TOOL = "Calculator"
COMPUTE_TOOLS: tuple[str, ...] = (PYTHON_TOOL, CALCULATOR_TOOL)

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# Integers as written in code: 1000, 1_000_000, 1,234 (and the list 1990,1975).
_WRITTEN_INTEGER = re.compile(r"(?<![\w.])\d+(?:[_,]\d+)*")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")


def last_number_text(text: str) -> str | None:
    """The last plain number in ``text`` as written, thousands commas dropped; ``None`` if none."""
    matches = _NUMBER.findall(text.replace(",", ""))
    return matches[-1] if matches else None


def last_number(text: str) -> Fraction | None:
    """The last plain number in ``text`` (``1,234`` reads as 1234), exactly; ``None`` if none."""
    written = last_number_text(text)
    return None if written is None else Fraction(written)


def mentioned_numbers(text: str) -> frozenset[int]:
    """The non-negative integers written in ``text`` (code or an expression).

    ``1_000`` reads as 1000; ``1,234`` reads as 1234 and as 1 and 234 (it may be a list).
    Digits inside names (``x1``) and after a decimal point do not count.
    """
    found: set[int] = set()
    for token in _WRITTEN_INTEGER.findall(text):
        parts = token.replace("_", "").split(",")
        found.update(int(part) for part in parts)
        if len(parts) > 1 and _THOUSANDS.fullmatch(token):
            found.add(int("".join(parts)))
    return frozenset(found)


@dataclass(frozen=True)
class Computation:
    """One successful Python or Calculator call that printed a number."""

    tool: str
    source: str
    """What the planner sent: the code or the expression (all argument values, joined)."""
    result: Fraction
    """The last number the call printed."""
    written: str
    """That number as printed (thousands commas dropped)."""

    @property
    def answer(self) -> str:
        """The result as an answer: an integer in plain digits, else the number as printed."""
        return str(self.result.numerator) if self.result.denominator == 1 else self.written

    def mentions(self, numbers: Iterable[int]) -> bool:
        """Whether the call's input writes every one of ``numbers``."""
        return set(numbers) <= mentioned_numbers(self.source)


def computations(evidence: Sequence[Evidence]) -> list[Computation]:
    """Every successful Python or Calculator call that printed a number, oldest first."""
    found = []
    for item in evidence:
        if not item.ok or item.tool not in COMPUTE_TOOLS:
            continue
        written = last_number_text(item.output)
        if written is None:
            continue
        source = " ".join(str(value) for value in item.arguments.values())
        found.append(Computation(item.tool, source, Fraction(written), written))
    return found


def computed_numbers(evidence: Sequence[Evidence]) -> list[Fraction]:
    """The last number of each successful Python or Calculator output, oldest first."""
    return [computation.result for computation in computations(evidence)]


def addressing_computation(
    evidence: Sequence[Evidence], inputs: Iterable[int]
) -> Computation | None:
    """The latest computation whose input writes every one of ``inputs``; ``None`` if none.

    The verifier calls this after every turn and stops at the first hit, so at that point the
    latest is the only one (one tool call per turn): the planner's first computation that
    addresses the task is its answer.
    """
    needed = frozenset(inputs)
    found = [c for c in computations(evidence) if c.mentions(needed)]
    return found[-1] if found else None


@dataclass(frozen=True)
class ComputedAnswerSolver:
    """STOP once a Python or Calculator call whose input writes the question's numbers printed a
    result, and answer with that result, right or wrong.

    It holds only the question's parameters (public: they are in the question), never the gold
    answer, and it never computes or checks anything: the answer must come out of a tool the
    planner called, and only the reward says whether it is right.
    """

    inputs: tuple[int, ...]

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        found = addressing_computation(evidence, self.inputs)
        return None if found is None else found.answer
