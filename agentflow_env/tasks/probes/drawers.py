"""The three drawer probes: which drawer (tool choice), which drawer first (delayed credit) and
when to finish (stop). Every task is a cabinet of drawers (``common.cabinet``) of which one
holds the code that answers the question; the drawer tools show what a drawer holds, whatever
they are asked, so the planner's only decisions are which tool to name and when to finish."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentflow_env.tasks.base import AnswerSolver, Evidence, PlanStep, Task
from agentflow_env.tasks.probes.common import (
    GENERATED_TASKS,
    Drawer,
    cabinet,
    check_split,
    draw_code,
    probe_task,
    read_code,
    task_draw,
)

TOOL_CHOICE, DELAYED_CREDIT, STOP = "tool_choice", "delayed_credit", "stop"


# -- evidence readers (what the rule verifier and generalist read the code with) ----------------
@dataclass(frozen=True)
class CodeSolver:
    """The code of the first successful tool output that states one (only the drawer the
    question names holds a code)."""

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        for item in evidence:
            code = read_code(item.output) if item.ok else None
            if code is not None:
                return code
        return None


@dataclass(frozen=True)
class FirstCallSolver:
    """The code of the first tool call only: a later call cannot change the answer."""

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        first = evidence[0] if evidence else None
        return read_code(first.output) if first is not None and first.ok else None


@dataclass(frozen=True)
class ReadingsSolver:
    """The code, only while exactly ``readings`` calls of ``tool`` are in memory: fewer have
    not confirmed it yet, one more loses it."""

    tool: str
    readings: int

    def solve(self, evidence: Sequence[Evidence]) -> str | None:
        calls = [item for item in evidence if item.tool == self.tool]
        if len(calls) != self.readings or not calls[-1].ok:
            return None
        return read_code(calls[-1].output)


# -- task sources ---------------------------------------------------------------------------------
class _DrawerSource:
    probe = ""
    minimum_drawers = 2

    def __init__(self, drawers: Sequence[Drawer], split: str = "train") -> None:
        check_split(split)
        if len(drawers) < self.minimum_drawers:
            raise ValueError(
                f"the {self.probe} probe needs at least {self.minimum_drawers} drawers among its "
                f"tools, got {len(drawers)}"
            )
        self.drawers = tuple(drawers)
        self.split = split

    def __len__(self) -> int:
        return GENERATED_TASKS


class ToolChoiceSource(_DrawerSource):
    """One of the drawers, drawn uniformly per task and named by colour in the question, holds
    the code; the others hold none. The gold plan opens it (one turn)."""

    probe = TOOL_CHOICE
    rule = ""
    """What the question adds after naming the drawer."""

    def solver(self) -> AnswerSolver:
        return CodeSolver()

    def sample(self, rng: np.random.Generator) -> Task:
        seed, draw = task_draw(rng, self.split)
        target, code = draw.choice(self.drawers), draw_code(draw)
        return probe_task(
            self.probe,
            seed,
            self.split,
            f"Which code is in the {target.colour} drawer?{self.rule}",
            code,
            cabinet(self.drawers, {target.tool: code}),
            plan=(_open(target),),
            solver=self.solver(),
            metadata={"target": target.tool},
        )


class DelayedCreditSource(ToolChoiceSource):
    """As ``ToolChoiceSource``, but only the first drawer opened counts (``FirstCallSolver``);
    run with ``termination="planner"`` the episode goes on to its last turn, where the reward
    the first turn decided is paid."""

    probe = DELAYED_CREDIT
    rule = " Only the first drawer opened counts."

    def solver(self) -> AnswerSolver:
        return FirstCallSolver()


class StopSource(_DrawerSource):
    """The first drawer holds the code, confirmed after exactly ``readings`` openings (drawn
    uniformly in ``1..max_readings`` per task, not said in the question) and lost on one more
    (``ReadingsSolver``). The verifier's verdict, shown after each turn, says STOP exactly
    when it is confirmed; run with ``termination="planner"``, the planner must then finish."""

    probe = STOP
    minimum_drawers = 1

    def __init__(self, drawers: Sequence[Drawer], max_readings: int, split: str = "train") -> None:
        super().__init__(drawers, split)
        if max_readings < 1:
            raise ValueError(f"max_readings must be >= 1, got {max_readings}")
        self.max_readings = max_readings

    def sample(self, rng: np.random.Generator) -> Task:
        seed, draw = task_draw(rng, self.split)
        target, code = self.drawers[0], draw_code(draw)
        readings = draw.randint(1, self.max_readings)
        return probe_task(
            self.probe,
            seed,
            self.split,
            f"Which code does the {target.colour} drawer hold? Finish once it is confirmed.",
            code,
            cabinet(self.drawers, {target.tool: code}),
            plan=(_open(target),) * readings,
            solver=ReadingsSolver(target.tool, readings),
            metadata={"target": target.tool, "readings": readings},
        )


def _open(drawer: Drawer) -> PlanStep:
    """Opening ``drawer``: the Context names its colour (the drawer shows all it holds anyway)."""
    return PlanStep(
        tool=drawer.tool,
        sub_goal=f"Open the {drawer.colour} drawer.",
        context=drawer.colour,
        justification=f"The question is about the {drawer.colour} drawer.",
    )
