"""Reading numbers out of Python and Calculator outputs, for the code tasks' solvers.

Each successful call contributes one number, the last one it printed, so a planner cannot
spray guesses in one call: it has to compute the answer and print it (last).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from agentflow_env.tasks.base import Evidence

PYTHON_TOOL = "Python"
CALCULATOR_TOOL = "Calculator"
COMPUTE_TOOLS: tuple[str, ...] = (PYTHON_TOOL, CALCULATOR_TOOL)

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def last_number(text: str) -> Fraction | None:
    """The last plain number in ``text`` (``1,234`` reads as 1234), exactly; ``None`` if none."""
    matches = _NUMBER.findall(text.replace(",", ""))
    return Fraction(matches[-1]) if matches else None


def computed_numbers(evidence: Sequence[Evidence]) -> list[Fraction]:
    """The last number of each successful Python or Calculator output, oldest first."""
    numbers = []
    for item in evidence:
        if item.ok and item.tool in COMPUTE_TOOLS:
            value = last_number(item.output)
            if value is not None:
                numbers.append(value)
    return numbers


@dataclass(frozen=True)
class ComputedAnswerSolver:
    """STOP once a Python or Calculator call printed the expected number, and answer it.

    Like the synthetic arithmetic solver, it knows what value to check for but never computes
    or runs anything: the answer must come out of a tool the planner called.
    """

    expected: int

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        if any(value == self.expected for value in computed_numbers(evidence)):
            return str(self.expected)
        return None
