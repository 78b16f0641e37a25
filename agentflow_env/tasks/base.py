"""What a task is: a question, its gold answers, and what the offline modules need to judge it;
where tasks come from (``TaskSource``), and the simplest source, a fixed list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentflow_env.retrieval.corpus import Corpus


@dataclass(frozen=True)
class Evidence:
    """One tool call as the modules see it in memory."""

    tool: str
    arguments: Mapping[str, Any]
    output: str
    ok: bool


class AnswerSolver(Protocol):
    """Answers a task from the evidence gathered so far, or returns ``None`` if it cannot yet.

    The rule verifier says STOP exactly when ``solve`` returns an answer, and the rule
    generalist answers with it. A solver must read facts out of the evidence text only, never
    from privileged tables, so that an episode succeeds only if the planner gathered evidence.
    It must not hold gold answers, nor decide by checking a printed value against the answer
    (that would let a policy guess once per turn until the verifier stops).
    """

    def solve(self, evidence: Sequence[Evidence]) -> str | None: ...


class AnswerChecker(Protocol):
    """Decides whether a final answer is correct when gold strings cannot list every correct one
    (e.g. any valid make-24 expression). Must be picklable."""

    def __call__(self, answer: str | None) -> bool: ...


@dataclass(frozen=True)
class PlanStep:
    """One step of a task's gold plan: what an expert planner would ask for."""

    tool: str
    sub_goal: str
    context: str
    justification: str = ""


@dataclass(frozen=True)
class Task:
    """A question with gold answers, the corpus to search, and privileged data for experts.

    ``sub_questions`` and ``constraints`` are the query analysis a rule initializer reports;
    they must not leak intermediate answers. ``gold_plan`` is privileged (expert planner only).
    ``checker``, when set, replaces answer matching against ``gold_answers`` for reward and success.
    """

    task_id: str
    question: str
    gold_answers: tuple[str, ...]
    corpus: Corpus | None = None
    kind: str = "qa"
    hops: int = 1
    split: str = "test"
    sub_questions: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    gold_plan: tuple[PlanStep, ...] = ()
    solver: AnswerSolver | None = field(default=None, compare=False, repr=False)
    checker: AnswerChecker | None = field(default=None, compare=False, repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def describe(self) -> dict[str, Any]:
        """The task's plain, non-privileged fields as JSON-ready data (no corpus, plan, solver,
        checker or metadata)."""
        return {
            "task_id": self.task_id,
            "question": self.question,
            "gold_answers": list(self.gold_answers),
            "kind": self.kind,
            "hops": self.hops,
            "split": self.split,
        }


class TaskSource(Protocol):
    """Where an environment gets its tasks from."""

    def sample(self, rng: np.random.Generator) -> Task:
        """Draw one task. All randomness must come from ``rng`` (for seeded resets)."""
        ...

    def __len__(self) -> int:
        """Number of distinct tasks (may be very large for generated sources)."""
        ...


class ListTaskSource:
    """A fixed list of tasks, sampled uniformly."""

    def __init__(self, tasks: Sequence[Task]):
        if not tasks:
            raise ValueError("a task list must hold at least one task")
        self.tasks = tuple(tasks)

    def sample(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(len(self.tasks)))]

    def __len__(self) -> int:
        return len(self.tasks)
