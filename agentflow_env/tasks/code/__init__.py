"""Tasks that need computation, for ``AgentFlow-Code-v0``: make-24 puzzles (a checker scores
any valid expression), arithmetic over synthetic-world facts (Search, then Python/Calculator),
and questions a short program answers (primes, Fibonacci numbers, digit sums...).

The rule modules answer only from tool outputs in memory, as in the search world. The
``AgentFlow-Code-v0`` environment over these tasks is ``CodeEnvConfig``'s
(``agentflow_env.envs.config``).
"""

from __future__ import annotations

from agentflow_env.tasks.code.compute import COMPUTE, FAMILIES, FAMILY_NAMES, Family
from agentflow_env.tasks.code.evidence import ComputedAnswerSolver, computed_numbers, last_number
from agentflow_env.tasks.code.fact_math import FACT_MATH, FactMathSolver, FactProgram
from agentflow_env.tasks.code.make24 import (
    MAKE24,
    InvalidExpression,
    Make24Checker,
    Make24Solver,
    find_solution,
    verified_expression,
)
from agentflow_env.tasks.code.source import CHECKED_KINDS, KINDS, CodeTaskSource, split_of

__all__ = [
    "CHECKED_KINDS",
    "COMPUTE",
    "FACT_MATH",
    "FAMILIES",
    "FAMILY_NAMES",
    "KINDS",
    "MAKE24",
    "CodeTaskSource",
    "ComputedAnswerSolver",
    "FactMathSolver",
    "FactProgram",
    "Family",
    "InvalidExpression",
    "Make24Checker",
    "Make24Solver",
    "computed_numbers",
    "find_solution",
    "last_number",
    "split_of",
    "verified_expression",
]
