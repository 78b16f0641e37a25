"""Tasks that need computation, for ``AgentFlow-Code-v0``: make-24 puzzles (a checker scores
any valid expression), arithmetic over synthetic-world facts (Search, then Python/Calculator),
and questions a short program answers (primes, Fibonacci numbers, digit sums...).

The rule modules answer only from tool outputs in memory, as in the search world.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
from agentflow_env.tasks.code.source import KINDS, CodeTaskSource, split_of

if TYPE_CHECKING:
    from agentflow_env.env import AgentFlowEnv

CODE_TOOLS: tuple[str, ...] = ("Python", "Calculator", "Search")


def make_code_env(
    seed: int = 0,
    kinds: str | Sequence[str] | None = None,
    split: str = "train",
    fresh_world: bool = False,
    tools: Sequence[Any] = CODE_TOOLS,
    **env_kwargs: Any,
) -> AgentFlowEnv:
    """An ``AgentFlowEnv`` over a ``CodeTaskSource`` (the ``AgentFlow-Code-v0`` entry point)."""
    import agentflow_env.tools.python_tool  # noqa: F401  (registers the "Python" tool)
    from agentflow_env.env import AgentFlowEnv

    source = CodeTaskSource(seed=seed, kinds=kinds, split=split, fresh_world=fresh_world)
    return AgentFlowEnv(task_source=source, tools=tools, **env_kwargs)


__all__ = [
    "CODE_TOOLS",
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
    "make_code_env",
    "split_of",
    "verified_expression",
]
