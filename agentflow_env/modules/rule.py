"""Offline, deterministic backends for the frozen modules.

They never look at gold answers or world tables: the verifier and the generalist ask the task's
solver to read facts out of the evidence text in memory, so an episode succeeds only if the
planner gathered that evidence. Tasks without a solver are answered by ``evidence_answer_solver``.
"""

from __future__ import annotations

from typing import Any

from agentflow_env.actions import PlannerAction
from agentflow_env.memory import Memory, QueryAnalysis
from agentflow_env.modules.base import FinalAnswer, Verification
from agentflow_env.tasks.base import AnswerSolver, Task
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet

CANNOT_ANSWER = "I cannot answer from the evidence gathered."


class RuleInitializer:
    """Reports the task's own analysis: objective, constraints, sub-questions, tools."""

    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis:
        return QueryAnalysis(
            objective=f"Answer the question: {task.question}",
            constraints=tuple(task.constraints),
            sub_questions=tuple(task.sub_questions),
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
    """STOP exactly when the evidence in memory answers the question."""

    async def verify(self, task: Task, memory: Memory) -> Verification:
        answer = solver_for(task).solve(memory.evidence())
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
        answer = solver_for(task).solve(memory.evidence())
        if answer is None:
            return FinalAnswer(None, CANNOT_ANSWER)
        return FinalAnswer(answer, f"The answer is {answer}.")


def solver_for(task: Task) -> AnswerSolver:
    return task.solver if task.solver is not None else EvidenceAnswerSolver(task.gold_answers)


class EvidenceAnswerSolver:
    """For tasks with no program (real QA data): a gold alias found verbatim in a tool output.

    This is an oracle reader, so it only measures whether the planner retrieved the answer-bearing
    text; use LLM modules to measure end-to-end answering on real datasets.
    """

    def __init__(self, gold_answers: tuple[str, ...]):
        self.gold_answers = tuple(a for a in gold_answers if a.strip())

    def solve(self, evidence: Any) -> str | None:
        from agentflow_env.tasks.scoring import normalize_answer

        for item in evidence:
            if not item.ok:
                continue
            text = f" {normalize_answer(item.output)} "
            for gold in self.gold_answers:
                if f" {normalize_answer(gold)} " in text:
                    return gold
        return None
