"""Driving the pre-flight episodes: every step logged, and the expert's episode recorded.

Each episode is the one episode loop (``agentflow_env.rollout.agents.episodes.play_episode``) stepping
the env as given (wrappers and all) and reading the unwrapped env's session. The expert planner
(``ExpertPlanner``) follows the task's gold plan; a task without one gets a fallback action
naming the env's first tool with the question as context, and the run says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.agents.episodes import OnStep, Planner, Stepped, play_episode_sync
from agentflow_env.rollout.agents.planners import ExpertPlanner
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


def live_session(env: AgentFlowEnv) -> Session:
    session = env.session
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


class ExpertOrFallback:
    """The expert (``ExpertPlanner``), or, for a task without a gold plan, the fallback: the
    first tool with the question as context; ``note`` says when it stood in."""

    def __init__(self) -> None:
        self.expert = ExpertPlanner()
        self.note: str | None = None

    async def next_action(self, session: Session) -> str:
        task = session.task
        if task.gold_plan:
            return await self.expert.next_action(session)
        if not session.tools.names:
            raise ValueError("the env has no tools, so no action can name one")
        tool = session.tools.names[0]
        self.note = self.note or (
            f"task {task.task_id} has no gold plan: fell back to {tool} with the question"
        )
        return format_planner_action(
            justification="The task has no gold plan; ask the first tool about the question.",
            context=task.question,
            sub_goal="Find evidence that answers the question.",
            tool_name=tool,
        )


class Repeating:
    """A planner that gives the same action every turn."""

    def __init__(self, action: str) -> None:
        self.action = action

    async def next_action(self, session: Session) -> str:
        return self.action


def play_logged(
    env: gym.Env, session: Session, planner: Planner, log: StepLog, episode: str, on_step: OnStep
) -> None:
    """Play ``env``'s episode (``session``, started) with ``planner``, every step through
    ``env.step`` and logged as ``episode``, until it ends or ``max_turns + 1`` steps have run."""

    async def step(action: Any) -> Stepped:
        return log.step(env, action, episode)

    limit = session.config.max_turns + 1
    play_episode_sync(session, planner, step, max_steps=limit, on_step=on_step)


StepHook = Callable[[Session, dict[str, Any], bool], None]
"""Called after each step of ``run_expert`` with the session, the step's info and whether it
ended."""


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
    base: AgentFlowEnv,
    seed: int,
    log: StepLog,
    episode: str,
    on_reset: Callable[[Session], None] | None = None,
    on_step: StepHook | None = None,
) -> ExpertRun:
    """Reset ``env`` (``base`` unwrapped) with ``seed`` and follow the expert (or its fallback)
    until the episode ends or ``max_turns + 1`` steps have run; an exception is kept in
    ``run.error``, never raised. ``on_reset(session)`` runs after the reset, ``on_step`` after
    each step."""
    run = ExpertRun()
    planner = ExpertOrFallback()
    try:
        observation, info = env.reset(seed=seed)
        session = live_session(base)
        run.reset_observation, run.reset_info = observation, info
        run.observations.append(observation)
        run.query, run.analysis = session.memory.query, session.memory.analysis
        run.gold_plan = bool(session.task.gold_plan)
        if on_reset is not None:
            on_reset(session)

        def record(action: Any, stepped: Stepped) -> None:
            observation, reward, terminated, truncated, info = stepped
            run.observations.append(observation)
            run.steps += 1
            if run.steps == 1:
                run.first_action = action
                run.first_entry = session.memory.entries[-1]
                run.first_calls = tuple(
                    e for e in session.memory.events if e.kind == "tool_call" and e.turn == 1
                )
            if on_step is not None:
                on_step(session, info, terminated or truncated)
            if terminated or truncated:
                run.final_info, run.final_reward = info, reward
                run.terminated, run.truncated = terminated, truncated

        play_logged(env, session, planner, log, episode, record)
    except Exception as error:
        run.error = error
    run.fallback_note = planner.note
    return run
