"""The planner protocol, the one episode loop, and whole episodes summarised.

``Planner`` is the one planner protocol: ``await planner.next_action(session)`` gives the next
action (text, token ids, or ``{"token_ids", "logprobs"}``) for a live ``Session``, so many
episodes can run on one event loop. The package's planners (``ExpertPlanner``,
``RandomPlanner``, ``OpenAIPlanner``) follow it and also keep the Gymnasium calling style,
``act(observation, info)``, on an env's current episode. ``ObservationPlanner`` is the one
adapter the other way: any planner in that calling style (``HFPlanner``, a user's) as a
``Planner``.

``play_episode`` is the one episode loop: the planner acts, the action is stepped, until the
episode ends. The evaluation runner awaits it on sessions; ``run_episode`` (a Gymnasium env and
a planner in its calling style), the demonstrations and the pre-flight check run it from
synchronous code through the env's own ``step`` (``play_episode_sync``), so wrappers see every
step.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, SupportsFloat, TypeVar

import gymnasium as gym

from agentflow_env.envs.env import unwrap_agentflow
from agentflow_env.workflow.memory import MemoryEntry
from agentflow_env.workflow.outcome import EndReason
from agentflow_env.workflow.session import Session

_T = TypeVar("_T")


class Planner(Protocol):
    """The planner protocol: the next action for a live session."""

    async def next_action(self, session: Session) -> Any:
        """The next action for ``session`` (text, token ids, or ids with log-probs)."""
        ...


class GymPlanner(Protocol):
    """The Gymnasium calling style: the next action from what the env last returned
    (``ObservationPlanner`` makes such a planner a ``Planner``)."""

    def act(self, observation: Any, info: dict[str, Any]) -> Any: ...


class ObservationPlanner:
    """A planner in the Gymnasium calling style, ``act(observation, info)``, as a ``Planner``.

    It is called with what the env last returned when the caller stepping a Gymnasium env
    passes that on (``observe``; ``run_episode`` does), else with the session's current
    observation (``Observation.as_gym()``) and an empty info. With ``in_thread`` every call
    runs in a worker thread, one at a time, off the event loop (a local model is one resource,
    and the planner may not be thread-safe). A planner whose ``act`` is a coroutine function
    takes the session instead (``async act(session)``, the form ``evaluate`` took before the
    protocol) and is awaited with it.
    """

    def __init__(self, planner: Any, *, in_thread: bool = False) -> None:
        self.planner = planner
        self.lock = asyncio.Lock() if in_thread else None
        self.seen: tuple[Any, dict[str, Any]] | None = None

    def observe(self, observation: Any, info: dict[str, Any]) -> None:
        """What the env returned last: the next ``act`` is called with it."""
        self.seen = (observation, info)

    async def next_action(self, session: Session) -> Any:
        act = self.planner.act
        if inspect.iscoroutinefunction(act):
            return await act(session)
        if self.seen is not None:
            observation, info = self.seen
        else:
            current = session.observation
            observation, info = (current.as_gym() if current is not None else {}), {}
        if self.lock is None:
            return act(observation, info)
        async with self.lock:
            return await asyncio.to_thread(act, observation, info)


def as_planner(planner: Any) -> Planner:
    """``planner`` when it follows the protocol (``next_action``), else
    ``ObservationPlanner(planner)``."""
    if callable(getattr(planner, "next_action", None)):
        return planner
    return ObservationPlanner(planner)


Stepped = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
"""What one step gave: Gymnasium's ``(observation, reward, terminated, truncated, info)``."""
Step = Callable[[Any], Awaitable[Stepped]]
"""``await step(action)``: take one action in the episode."""
OnStep = Callable[[Any, Stepped], None]
"""Called after each step with the action and what the step gave."""


def session_step(session: Session) -> Step:
    """Stepping ``session`` itself (its observations as ``Observation``, not Gymnasium dicts)."""

    async def step(action: Any) -> Stepped:
        outcome = await session.step(action)
        return (
            outcome.observation,
            outcome.reward,
            outcome.terminated,
            outcome.truncated,
            outcome.info,
        )

    return step


def env_step(env: gym.Env) -> Step:
    """Stepping the (possibly wrapped) Gymnasium ``env`` with its synchronous ``step``: for
    ``play_episode_sync`` only (``env.step`` drives the env's own event loop)."""

    async def step(action: Any) -> Stepped:
        observation, reward, terminated, truncated, info = env.step(action)
        return observation, reward, bool(terminated), bool(truncated), info

    return step


async def play_episode(
    session: Session,
    planner: Planner,
    step: Step | None = None,
    *,
    max_steps: int | None = None,
    on_step: OnStep | None = None,
) -> int:
    """Let ``planner`` act in the started ``session`` until a step ends the episode (it is
    terminated or truncated) or ``max_steps`` steps have run; returns the steps taken.

    ``step`` takes each action (default: ``session.step``; ``env_step(env)`` steps a Gymnasium
    env, wrappers and all, whose episode ``session`` is); ``on_step(action, stepped)`` runs
    after each step. Exceptions of the planner, the step and ``on_step`` propagate.
    """
    take = step or session_step(session)
    steps = 0
    if session.done:
        return steps
    while max_steps is None or steps < max_steps:
        action = await planner.next_action(session)
        stepped = await take(action)
        steps += 1
        if on_step is not None:
            on_step(action, stepped)
        if stepped[2] or stepped[3]:
            break
    return steps


def play_episode_sync(
    session: Session,
    planner: Planner,
    step: Step,
    *,
    max_steps: int | None = None,
    on_step: OnStep | None = None,
) -> int:
    """``play_episode`` from synchronous code, in the caller's thread and without an event
    loop, for a planner and a step that never wait on one: a synchronous planner behind its
    ``next_action`` (``ObservationPlanner``, the scripted planners) and ``env_step(env)``,
    whose ``env.step`` runs the env's own loop. ``RuntimeError`` if either waits."""
    return _run_inline(play_episode(session, planner, step, max_steps=max_steps, on_step=on_step))


def _run_inline(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine``, which must finish without suspending, to its result."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError(
        "the planner or the step waited on an event loop: from synchronous code use a "
        "synchronous planner (act(observation, info)); await play_episode on a loop otherwise"
    )


@dataclass
class EpisodeRecord:
    task_id: str
    question: str
    gold_answers: tuple[str, ...]
    answer: str | None
    success: bool
    reward: float
    seed: int | None
    actions: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    memory: list[dict[str, Any]] = field(default_factory=list)
    end_reason: str = ""
    module_errors: list[str] = field(default_factory=list)

    @property
    def module_failed(self) -> bool:
        """A frozen module failed: the episode ended on it, or its answer could not be written."""
        return self.end_reason == EndReason.MODULE_ERROR or bool(self.module_errors)

    def memory_entries(self) -> list[MemoryEntry]:
        return [MemoryEntry(**entry) for entry in self.memory]

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "seed": self.seed,
            "question": self.question,
            "gold_answers": list(self.gold_answers),
            "answer": self.answer,
            "success": self.success,
            "reward": self.reward,
            "end_reason": self.end_reason,
            "module_errors": self.module_errors,
            "metrics": self.metrics,
            "actions": self.actions,
            "memory": self.memory,
        }


def run_episode(
    env: gym.Env, planner: GymPlanner | Planner, seed: int | None = None
) -> EpisodeRecord:
    """Reset ``env`` (an ``AgentFlowEnv``, possibly wrapped) with ``seed`` and let ``planner``
    act until the episode ends: ``planner.act(observation, info)`` gets what ``env`` returned
    last, and every action goes through ``env.step``. A planner with only ``next_action`` is
    asked with the session; it must not wait on an event loop here (``env.step`` runs the env's
    own): in async code use ``play_episode``."""
    base = unwrap_agentflow(env)
    observation, info = env.reset(seed=seed)
    session = base.session
    assert session is not None  # reset() started one
    acting: Planner
    if callable(getattr(planner, "act", None)):
        acting = watching = ObservationPlanner(planner)
        watching.observe(observation, info)
    else:
        acting, watching = as_planner(planner), None
    actions: list[str] = []
    reward = 0.0
    final = info

    def record(action: Any, stepped: Stepped) -> None:
        nonlocal reward, final
        actions.append(action if isinstance(action, str) else repr(action))
        reward += float(stepped[1])
        if watching is not None:
            watching.observe(stepped[0], stepped[4])
        final = stepped[4]

    play_episode_sync(session, acting, env_step(env), on_step=record)
    return EpisodeRecord(
        task_id=final["task_id"],
        question=final["question"],
        gold_answers=tuple(final["gold_answers"]),
        answer=final["answer"],
        success=bool(final["success"]),
        reward=reward,
        seed=seed,
        actions=actions,
        metrics=dict(final["metrics"]),
        memory=list(final["memory"]),
        end_reason=final["end_reason"],
        module_errors=[str(error) for error in final.get("module_errors", ())],
    )


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Success rate, means and counts over ``records``.

    ``module_error_episodes`` counts the episodes a frozen module failed in (they say nothing
    about the planner) and ``first_module_error`` is the first such error, or ``None``.
    """
    n = len(records)
    failed = [r for r in records if r.module_failed]
    first_error = next((e for r in failed for e in r.module_errors), None)
    if failed and first_error is None:
        first_error = f"episode {failed[0].task_id} ended on a module error"
    errors = {"module_error_episodes": len(failed), "first_module_error": first_error}
    if n == 0:
        return {
            "episodes": 0,
            "success_rate": 0.0,
            "mean_turns": 0.0,
            "tool_calls": 0,
            "invalid_calls": 0,
            "mean_reward": 0.0,
            **errors,
        }
    return {
        "episodes": n,
        "success_rate": sum(r.success for r in records) / n,
        "mean_turns": sum(r.metrics.get("turns", 0) for r in records) / n,
        "tool_calls": int(sum(r.metrics.get("tool_calls", 0) for r in records)),
        "invalid_calls": int(sum(r.metrics.get("invalid_actions", 0) for r in records)),
        "mean_reward": sum(r.reward for r in records) / n,
        **errors,
    }
