"""The rule verifier and generalist never reach the gold answers, and a guessing planner gets one
scored answer per episode: structural checks for every synthetic and ``AgentFlow-Code-v0`` kind.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.modules import Modules
from agentflow_env.modules.rule import (
    EvidenceAnswerSolver,
    RuleExecutor,
    RuleGeneralist,
    RuleInitializer,
    RuleVerifier,
    rule_view,
)
from agentflow_env.tasks.base import PlanStep, Task
from agentflow_env.tasks.code import COMPUTE, FACT_MATH, MAKE24, CodeTaskSource
from agentflow_env.tasks.code.make24 import submitted_expression, verified_expression
from agentflow_env.tasks.synthetic.program import KINDS as SYNTHETIC_KINDS
from agentflow_env.tools.base import Tool
from agentflow_env.tools.calculator import CalculatorTool
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.registry import ToolSet
from agentflow_env.tools.search import SearchTool
from agentflow_env.workflow.actions import PlannerAction, format_planner_action
from agentflow_env.workflow.frozen_modules import FinalAnswer, Verification
from agentflow_env.workflow.memory import Memory

CODE_KINDS = (MAKE24, FACT_MATH, COMPUTE)
SEEDS = range(6)
MAX_TURNS = 10  # the env's default; every episode here ends by then


class Untouchable:
    """Stands in for a privileged field; any use of it is recorded and raises."""

    def __init__(self, name: str, touches: list[str]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_touches", touches)

    def _touch(self, how: str) -> Any:
        self._touches.append(f"{self._name}.{how}")
        raise AssertionError(f"a rule module read {self._name} ({how})")

    def __getattr__(self, attr: str) -> Any:
        return self._touch(attr)

    def __iter__(self) -> Any:
        return self._touch("__iter__")

    def __len__(self) -> int:
        return self._touch("__len__")

    def __getitem__(self, key: Any) -> Any:
        return self._touch("__getitem__")

    def __contains__(self, item: Any) -> bool:
        return self._touch("__contains__")

    def __bool__(self) -> bool:
        return self._touch("__bool__")

    def __eq__(self, other: object) -> bool:
        return self._touch("__eq__")

    def __hash__(self) -> int:
        return self._touch("__hash__")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._touch("__call__")

    def __str__(self) -> str:
        return self._touch("__str__")

    def __repr__(self) -> str:
        return self._touch("__repr__")


def without_privileges(task: Task, touches: list[str]) -> Task:
    """``task`` with its gold answers, checker, gold plan and metadata made untouchable."""
    hidden = {
        name: cast(Any, Untouchable(name, touches))
        for name in ("gold_answers", "checker", "gold_plan", "metadata")
    }
    return dataclasses.replace(task, **hidden)


class Unprivileged:
    """Runs one rule module on the task with its privileged fields made untouchable."""

    def __init__(self, module: Any, touches: list[str]) -> None:
        self.module, self.touches = module, touches

    async def analyze(self, task: Task, tools: ToolSet) -> Any:
        return await self.module.analyze(without_privileges(task, self.touches), tools)

    async def command(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> dict[str, Any]:
        hidden = without_privileges(task, self.touches)
        return cast(dict[str, Any], await self.module.command(action, tool, hidden, memory))

    async def verify(self, task: Task, memory: Memory) -> Verification:
        return cast(
            Verification, await self.module.verify(without_privileges(task, self.touches), memory)
        )

    async def answer(self, task: Task, memory: Memory) -> FinalAnswer:
        return cast(
            FinalAnswer, await self.module.answer(without_privileges(task, self.touches), memory)
        )


def unprivileged_rule_modules(touches: list[str]) -> Modules:
    return Modules(
        initializer=Unprivileged(RuleInitializer(), touches),
        executor=Unprivileged(RuleExecutor(), touches),
        verifier=Unprivileged(RuleVerifier(), touches),
        generalist=Unprivileged(RuleGeneralist(), touches),
    )


def code_env(kind: str, **kwargs: Any) -> AgentFlowEnv:
    tools = [PythonTool(), CalculatorTool(), SearchTool()]
    return AgentFlowEnv(task_source=CodeTaskSource(kinds=kind), tools=tools, **kwargs)


def synthetic_env(kind: str, **kwargs: Any) -> AgentFlowEnv:
    return AgentFlowEnv(kinds=[kind], **kwargs)


def action(step: PlanStep) -> str:
    return format_planner_action(
        step.justification or "plan", step.context, step.sub_goal, step.tool
    )


def play(env: AgentFlowEnv, seed: int, act: Callable[[Task, int], str]) -> dict[str, Any]:
    """One episode; ``act(task, turn)`` writes the action of each (0-based) turn."""
    env.reset(seed=seed)
    for turn in range(MAX_TURNS):
        _, _, terminated, truncated, info = env.step(act(env.task, turn))
        if terminated or truncated:
            return dict(info)
    raise AssertionError("the episode did not end")


def expert(task: Task, turn: int) -> str:
    return action(task.gold_plan[min(turn, len(task.gold_plan) - 1)])


# -- the gold answers are out of the rule modules' reach ---------------------------------------
@pytest.mark.parametrize(
    ("family", "kind"),
    [("code", k) for k in CODE_KINDS] + [("synthetic", k) for k in SYNTHETIC_KINDS],
)
def test_rule_modules_run_every_task_kind_without_touching_gold(family: str, kind: str) -> None:
    touches: list[str] = []
    make = code_env if family == "code" else synthetic_env
    env = make(kind, modules=unprivileged_rule_modules(touches))
    try:
        for seed in SEEDS:
            info = play(env, seed, expert)
            assert env.task.kind == kind
            assert info["module_errors"] == [], info["module_errors"]
            assert info["end_reason"] == "verifier_stop"
            assert info["success"] and info["answer"] is not None, (env.task.question, info)
    finally:
        env.close()
    assert touches == []


def test_the_only_gold_reader_is_the_documented_retrieval_oracle() -> None:
    touches: list[str] = []
    task = CodeTaskSource(kinds=COMPUTE).sample(np.random.default_rng(0))
    view = rule_view(without_privileges(task, touches))
    assert not view.retrieval_oracle and view.solver is task.solver and touches == []
    assert not hasattr(view, "gold_answers") and not hasattr(view, "checker")

    dataset_task = Task(task_id="qa-1", question="Who wrote it?", gold_answers=("Ana Lark",))
    oracle = rule_view(dataset_task)
    assert oracle.retrieval_oracle and isinstance(oracle.solver, EvidenceAnswerSolver)
    with pytest.raises(AssertionError, match="gold_answers"):
        rule_view(without_privileges(dataset_task, touches))
    assert touches == ["gold_answers.__iter__"]


# -- one scored answer per episode --------------------------------------------------------------
def _python(code: str) -> str:
    return format_planner_action("guess", code, "print the answer", "Python")


def _inputs_comment(task: Task) -> str:
    return "# " + " ".join(str(v) for v in task.metadata["params"].values())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_guesser_gets_its_first_guess_scored_and_nothing_more(seed: int) -> None:
    env = code_env(COMPUTE, max_turns=6)
    try:
        env.reset(seed=seed)
        gold = int(env.task.gold_answers[0])
        guesses = [gold + 1, gold, gold + 2, gold - 1, gold, gold]  # the right one comes second

        def guesser(task: Task, turn: int) -> str:
            return _python(f"{_inputs_comment(task)}\nprint({guesses[turn]})")

        info = play(env, seed, guesser)
        assert info["metrics"]["turns"] == 1 and info["end_reason"] == "verifier_stop"
        assert info["answer"] == str(gold + 1)
        assert not info["success"] and info["reward"] == 0.0

        # The same guesser with the right guess first is scored right: the one guess counts.
        guesses[0] = gold
        info = play(env, seed, guesser)
        assert info["metrics"]["turns"] == 1 and info["success"] and info["reward"] == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_printing_bare_guesses_never_stops_the_episode(seed: int) -> None:
    env = code_env(COMPUTE, max_turns=5)
    try:
        env.reset(seed=seed)
        gold = int(env.task.gold_answers[0])
        guesses = [gold + 1, gold, gold - 1, gold + 2, gold]
        info = play(env, seed, lambda task, turn: _python(f"print({guesses[turn]})"))
        statuses = [entry["verification_status"] for entry in info["memory"]]
        assert statuses == ["CONTINUE"] * 5 and info["end_reason"] == "max_turns"
        assert info["answer"] is None and info["reward"] == 0.0
    finally:
        env.close()


# -- the verifier's decision does not depend on the printed value -------------------------------
def _print_plus_one(code: str) -> str:
    lines = code.rstrip("\n").split("\n")
    match = re.fullmatch(r"print\((.*)\)", lines[-1])
    assert match, code
    return "\n".join([*lines[:-1], f"print(({match.group(1)}) + 1)"])


def _wrong_make24(numbers: tuple[int, ...]) -> str:
    for ops in ("+++", "***", "*++", "+*+", "-++", "++-"):
        text = f"{numbers[0]} {ops[0]} {numbers[1]} {ops[1]} {numbers[2]} {ops[2]} {numbers[3]}"
        if verified_expression(text, numbers) is None:
            return text
    raise AssertionError(numbers)


def _wrong_last_step(task: Task) -> PlanStep:
    """The expert's last step, changed so that it computes a wrong result."""
    step = task.gold_plan[-1]
    if task.kind == MAKE24:
        return dataclasses.replace(step, context=_wrong_make24(task.metadata["numbers"]))
    if step.tool == "Calculator":
        return dataclasses.replace(step, context=f"({step.context}) + 1")
    return dataclasses.replace(step, context=_print_plus_one(step.context))


def expert_with_a_wrong_result(task: Task, turn: int) -> str:
    last = turn >= len(task.gold_plan) - 1
    return action(_wrong_last_step(task)) if last else expert(task, turn)


@pytest.mark.parametrize("kind", CODE_KINDS)
def test_a_wrong_result_stops_at_the_same_turn_as_the_right_one(kind: str) -> None:
    env = code_env(kind)
    try:
        for seed in SEEDS:
            right = play(env, seed, expert)
            task = env.task
            spoiled = play(env, seed, expert_with_a_wrong_result)
            statuses = [[e["verification_status"] for e in i["memory"]] for i in (right, spoiled)]
            assert statuses[0] == statuses[1], (task.question, statuses)
            assert statuses[0][-1] == "STOP" and right["success"] and right["reward"] == 1.0
            assert spoiled["end_reason"] == "verifier_stop" and spoiled["answer"] is not None
            assert not spoiled["success"] and spoiled["reward"] == 0.0
    finally:
        env.close()


def test_make24_by_python_stops_on_the_last_printed_line_only() -> None:
    env = code_env(MAKE24)
    try:
        env.reset(seed=0)
        numbers = env.task.metadata["numbers"]
        solution = env.task.gold_answers[0]
        wrong = _wrong_make24(numbers)
        spray = f"print({solution!r})\nprint({wrong!r})"  # the right one first, then a wrong one
        info = play(env, 0, lambda task, turn: _python(spray))
        assert info["metrics"]["turns"] == 1 and info["end_reason"] == "verifier_stop"
        assert info["answer"] == submitted_expression(wrong, numbers) is not None
        assert info["reward"] == 0.0 and not info["success"]
    finally:
        env.close()


def compute_first(task: Task, turn: int) -> str:
    """The expert's plan with its computation done once before any search."""
    steps = [task.gold_plan[-1], *task.gold_plan]
    return action(steps[min(turn, len(steps) - 1)])


def test_fact_math_does_not_stop_before_the_facts_are_read() -> None:
    env = code_env(FACT_MATH)
    try:
        for seed in SEEDS:
            env.reset(seed=seed)
            info = play(env, seed, compute_first)
            statuses = [e["verification_status"] for e in info["memory"]]
            searches = len(env.task.gold_plan) - 1
            # The early computation writes the right values, so it becomes the answer once the
            # last fact is read: the verifier waits for the evidence, then stops.
            assert statuses[:searches] == ["CONTINUE"] * searches, statuses
            assert statuses[searches] == "STOP" and info["success"]
    finally:
        env.close()


def test_the_verdicts_are_the_same_whatever_value_is_printed() -> None:
    env = code_env(COMPUTE, max_turns=3)
    rng = random.Random(0)
    try:
        verdicts = set()
        for _ in range(4):
            value = rng.randrange(-50, 10**6)

            def guesser(task: Task, turn: int, value: int = value) -> str:
                code = f"{_inputs_comment(task)}\nprint({value})" if turn == 2 else "print('.')"
                return _python(code)

            info = play(env, 1, guesser)
            assert info["answer"] == str(value)
            verdicts.add(tuple(e["verification_status"] for e in info["memory"]))
        assert verdicts == {("CONTINUE", "CONTINUE", "STOP")}
    finally:
        env.close()
