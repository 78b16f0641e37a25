"""Offline, deterministic backends for the frozen modules.

Each rule module turns the task it is given into a ``RuleTaskView`` (``rule_view``) before it
reads anything, and works from that view and the memory only. The view holds the question, its
analysis (sub-questions, constraints) and the task's evidence reader (``Task.solver``); it has
no gold answers, no checker, no gold plan and no metadata, so for every task with a solver (the
synthetic world and every ``AgentFlow-Code-v0`` kind) the gold answers are out of reach of the
verifier and the generalist. The verifier says STOP exactly when the solver reads an answer out
of the evidence in memory and the generalist answers with it; only the reward compares the
answer with the gold answers.

The one exception is a task without a solver (a QA dataset: no question program to evaluate).
There the view's reader is ``EvidenceAnswerSolver``, a retrieval oracle that does compare
tool outputs with the gold aliases: the verifier stops once a gold alias appears verbatim in a
tool output and the generalist answers with that alias. On such tasks the rule modules measure
retrieval, not answering; use LLM modules for end-to-end answering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentflow_env.tasks.base import AnswerSolver, Task
from agentflow_env.tasks.oracle import EvidenceAnswerSolver, evidence_reader
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import PlannerAction
from agentflow_env.workflow.frozen_modules import FinalAnswer, Verification
from agentflow_env.workflow.memory import Memory, QueryAnalysis

CANNOT_ANSWER = "I cannot answer from the evidence gathered."


@dataclass(frozen=True)
class RuleTaskView:
    """What the rule modules may read of a task. No gold answers, checker or gold plan.

    ``retrieval_oracle`` is True when ``solver`` is the gold-alias oracle of a task without a
    solver of its own (``EvidenceAnswerSolver``): the only case where the view's reader was
    built from gold answers.
    """

    question: str
    sub_questions: tuple[str, ...]
    constraints: tuple[str, ...]
    solver: AnswerSolver

    @property
    def retrieval_oracle(self) -> bool:
        return isinstance(self.solver, EvidenceAnswerSolver)


def rule_view(task: Task) -> RuleTaskView:
    """The rule modules' view of ``task``: the only place they touch the ``Task`` object.

    Reads ``task.gold_answers`` only when the task has no solver (the retrieval oracle, see the
    module docstring); never reads ``task.checker``, ``task.gold_plan`` or ``task.metadata``.
    """
    return RuleTaskView(
        question=task.question,
        sub_questions=tuple(task.sub_questions),
        constraints=tuple(task.constraints),
        solver=evidence_reader(task),
    )


class RuleInitializer:
    """Reports the task's own analysis: objective, constraints, sub-questions, tools."""

    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis:
        view = rule_view(task)
        return QueryAnalysis(
            objective=f"Answer the question: {view.question}",
            constraints=view.constraints,
            sub_questions=view.sub_questions,
            tools=tuple(tools.names),
        )


class RuleExecutor:
    """Fills the tool's primary argument from the planner's Context (else its Sub-Goal)."""

    async def command(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> dict[str, Any]:
        text = action.context.strip() or action.sub_goal.strip()
        return {tool.card.primary_argument: text}


class RuleVerifier:
    """STOP exactly when the task's solver reads an answer out of the evidence in memory."""

    async def verify(self, task: Task, memory: Memory) -> Verification:
        view = rule_view(task)
        answer = view.solver.solve(memory.evidence())
        if answer is not None:
            return Verification(True, "The evidence in memory answers the question.")
        analysis = memory.analysis
        sub_questions = analysis.sub_questions if analysis else ()
        useful = sum(1 for e in memory.evidence() if e.ok)
        open_questions = (
            tuple(sub_questions[min(useful, len(sub_questions) - 1) :]) if sub_questions else ()
        )
        return Verification(False, "The evidence does not answer the question yet.", open_questions)


class RuleGeneralist:
    """Answers with what the solver reads from the evidence, or says it cannot."""

    async def answer(self, task: Task, memory: Memory) -> FinalAnswer:
        answer = rule_view(task).solver.solve(memory.evidence())
        if answer is None:
            return FinalAnswer(None, CANNOT_ANSWER)
        return FinalAnswer(answer, f"The answer is {answer}.")


def solver_for(task: Task) -> AnswerSolver:
    """The evidence reader the rule modules use for ``task`` (see ``rule_view``)."""
    return rule_view(task).solver
