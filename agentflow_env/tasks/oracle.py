"""Reading an answer out of gathered evidence: the task's own solver, or the gold-alias oracle.

The rule modules judge with ``evidence_reader(task)``, and the diagnostics ask the same reader
whether the evidence answered the question when a verifier said STOP.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentflow_env.tasks.base import AnswerSolver, Evidence, Task
from agentflow_env.tasks.scoring import normalize_answer

__all__ = ["EvidenceAnswerSolver", "evidence_reader"]


def evidence_reader(task: Task) -> AnswerSolver:
    """``task.solver``, or for a task without one (a QA dataset) the gold-alias oracle."""
    return task.solver if task.solver is not None else EvidenceAnswerSolver(task.gold_answers)


class EvidenceAnswerSolver:
    """For tasks with no program (real QA data): a gold alias found verbatim in a tool output.

    This is a retrieval oracle and it does compare with the gold answers: it only measures
    whether the planner retrieved answer-bearing text. Use LLM modules to measure end-to-end
    answering on real datasets.
    """

    def __init__(self, gold_answers: tuple[str, ...]):
        self.gold_answers = tuple(a for a in gold_answers if a.strip())

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        for item in evidence:
            if not item.ok:
                continue
            text = f" {normalize_answer(item.output)} "
            for gold in self.gold_answers:
                if f" {normalize_answer(gold)} " in text:
                    return gold
        return None
