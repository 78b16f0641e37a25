"""Driving the pre-flight episodes: every step logged, and the expert's episode recorded.

The expert planner (``ExpertPlanner``) follows the task's gold plan; a task without one gets a
fallback action naming the env's first tool with the question as context, and the run says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentflow_env.envs.env import unwrap_agentflow
from agentflow_env.rollout.planners import ExpertPlanner
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.memory import Event, MemoryEntry, QueryAnalysis
from agentflow_env.workflow.session import Session

EVIDENCE_CHARS = 160
"""How much of a quoted text (an error, an answer, a question) an item's evidence shows."""


def quote(value: object, limit: int = EVIDENCE_CHARS) -> str:
    """``value`` on one line, cut to ``limit`` characters; a string in quotes, as ``repr``
    shows it."""
    flat = " ".join(str(value).split())
    flat = flat if len(flat) <= limit else flat[: limit - 3] + "..."
    return repr(flat) if isinstance(value, str) else flat


def live_session(env: gym.Env) -> Session:
    session = unwrap_agentflow(env).session
    if session is None:
        raise RuntimeError("no episode: reset() was not called")
    return session


@dataclass(frozen=True)
class StepRecord:
    """What one ``env.step`` returned about how the episode stands."""

    episode: str
    turn: int
    terminated: bool
    truncated: bool
    verification: str | None
    end_reason: str | None
    module_errors: tuple[str, ...] = ()


@dataclass
class StepLog:
    """Every step of every pre-flight episode, for the check that episodes end only on STOP or
    a limit."""

    steps: list[StepRecord] = field(default_factory=list)

    def step(
        self, env: gym.Env, action: Any, episode: str
    ) -> tuple[dict[str, Any], Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = env.step(action)
        self.steps.append(
            StepRecord(
                episode,
                int(info.get("turn", -1)),
                bool(terminated),
                bool(truncated),
                info.get("verification"),
                info.get("end_reason"),
                tuple(str(e) for e in info.get("module_errors") or ()),
            )
        )
        return observation, reward, bool(terminated), bool(truncated), info


def planner_action(env: gym.Env) -> tuple[str, str | None]:
    """The expert's next action, and a note when the task has no gold plan and the fallback
    (the first tool, the question as context) stands in for it."""
    base = unwrap_agentflow(env)
    task = base.task
    if task.gold_plan:
        return ExpertPlanner(env).act(), None
    if not base.tools.names:
        raise ValueError("the env has no tools, so no action can name one")
    tool = base.tools.names[0]
    action = format_planner_action(
        justification="The task has no gold plan; ask the first tool about the question.",
        context=task.question,
        sub_goal="Find evidence that answers the question.",
        tool_name=tool,
    )
    return action, f"task {task.task_id} has no gold plan: fell back to {tool} with the question"


StepHook = Callable[[gym.Env, dict[str, Any], bool], None]
"""Called after each step of ``run_expert`` with the env, the step's info and whether it ended."""


@dataclass
class ExpertRun:
    """The expert's episode: what the check items read, and the error that cut it short."""

    reset_observation: dict[str, Any] | None = None
    reset_info: dict[str, Any] | None = None
    query: str | None = None
    analysis: QueryAnalysis | None = None
    gold_plan: bool = True
    fallback_note: str | None = None
    first_action: str | None = None
    first_entry: MemoryEntry | None = None
    first_calls: tuple[Event, ...] = ()
    observations: list[dict[str, Any]] = field(default_factory=list)
    final_info: dict[str, Any] | None = None
    final_reward: Any = None
    terminated: bool = False
    truncated: bool = False
    steps: int = 0
    error: Exception | None = None

    def missing(self, what: str) -> str:
        """Why ``what`` could not be seen: the error that cut the episode short, if any."""
        if self.error is not None:
            return f"the episode failed before {what}: {type(self.error).__name__}: {self.error}"
        return f"the episode never reached {what}"


def run_expert(
    env: gym.Env,
    seed: int,
    log: StepLog,
    episode: str,
    on_reset: Callable[[gym.Env], None] | None = None,
    on_step: StepHook | None = None,
) -> ExpertRun:
    """Reset with ``seed`` and follow the expert (or its fallback) until the episode ends or
    ``max_turns + 1`` steps have run; an exception is kept in ``run.error``, never raised.
    ``on_reset(env)`` runs after the reset, ``on_step`` after each step."""
    run = ExpertRun()
    try:
        observation, info = env.reset(seed=seed)
        session = live_session(env)
        run.reset_observation, run.reset_info = observation, info
        run.observations.append(observation)
        run.query, run.analysis = session.memory.query, session.memory.analysis
        run.gold_plan = bool(session.task.gold_plan)
        if on_reset is not None:
            on_reset(env)
        for _ in range(session.config.max_turns + 1):
            action, note = planner_action(env)
            run.fallback_note = run.fallback_note or note
            observation, reward, terminated, truncated, info = log.step(env, action, episode)
            run.observations.append(observation)
            run.steps += 1
            if run.steps == 1:
                run.first_action = action
                run.first_entry = session.memory.entries[-1]
                run.first_calls = tuple(
                    e for e in session.memory.events if e.kind == "tool_call" and e.turn == 1
                )
            if on_step is not None:
                on_step(env, info, terminated or truncated)
            if terminated or truncated:
                run.final_info, run.final_reward = info, reward
                run.terminated, run.truncated = terminated, truncated
                break
    except Exception as error:
        run.error = error
    return run
