"""Planners that act on a ``Session``, so many episodes run concurrently on one event loop.

A ``PlannerFactory`` makes one planner per episode (``factory(index)``), which keeps per-episode
state (a random planner's generator) apart. The scripted planners are the ones ``run`` uses,
acting on the session's task; a served model is asked through one shared chat client; a local
model (or any blocking ``act(observation, info)`` planner) runs in a worker thread, one call at
a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from agentflow_env.llm.client import ChatBackend
from agentflow_env.rollout.llm_planners import messages_from_observation
from agentflow_env.rollout.planners import expert_session_action, random_action
from agentflow_env.workflow.session import Session

__all__ = [
    "BlockingPlanner",
    "ChatPlanner",
    "ExpertSessionPlanner",
    "PlannerFactory",
    "RandomSessionPlanner",
    "SessionPlanner",
]


class SessionPlanner(Protocol):
    async def act(self, session: Session) -> Any:
        """The next action for ``session`` (text, token ids, or ids with log-probs)."""
        ...


PlannerFactory = Callable[[int], SessionPlanner]
"""``factory(episode_index)``: the planner of one episode."""


class ExpertSessionPlanner:
    """Follows the task's gold plan (see ``agentflow_env.rollout.planners.ExpertPlanner``),
    finishing with the answer it read where the planner may finish."""

    async def act(self, session: Session) -> str:
        return expert_session_action(session)


class RandomSessionPlanner:
    """The random baseline, seeded per episode (``seed`` and the episode index)."""

    def __init__(self, seed: int, index: int) -> None:
        self.rng = np.random.default_rng([seed, index])

    async def act(self, session: Session) -> str:
        return random_action(self.rng, session.tools.names, session.task)


@dataclass
class _SessionHolder:
    """What ``messages_from_observation`` reads a non-ChatML prompt's messages from."""

    session: Session


class ChatPlanner:
    """A chat model behind a shared backend (e.g. one ``LLMEndpoint`` client for all episodes)."""

    def __init__(
        self,
        backend: ChatBackend,
        *,
        temperature: float | None = None,
        max_tokens: int | None = 512,
    ) -> None:
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def act(self, session: Session) -> str:
        observation = session.observation
        text = observation.text if observation is not None else ""
        messages = messages_from_observation({"text": text}, _SessionHolder(session))
        reply = await self.backend.chat(
            messages, temperature=self.temperature, max_tokens=self.max_tokens
        )
        return reply.text


class BlockingPlanner:
    """Any ``act(observation, info)`` planner (e.g. ``HFPlanner``), run off the event loop.

    Calls are serialised: a local model is one resource, and the planner may not be thread-safe.
    """

    def __init__(self, planner: Any, lock: asyncio.Lock) -> None:
        self.planner = planner
        self.lock = lock

    async def act(self, session: Session) -> Any:
        observation = session.observation
        gym_observation = observation.as_gym() if observation is not None else {}
        async with self.lock:
            return await asyncio.to_thread(self.planner.act, gym_observation, {})
