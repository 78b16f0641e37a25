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
    "AGENTFLOW_SAMPLING",
    "SAMPLINGS",
    "BlockingPlanner",
    "ChatPlanner",
    "ExpertSessionPlanner",
    "PlannerFactory",
    "RandomSessionPlanner",
    "Sampling",
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


@dataclass(frozen=True)
class Sampling:
    """How a served planner samples; ``None`` leaves a parameter to the endpoint or server."""

    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


AGENTFLOW_SAMPLING = Sampling(
    temperature=0.7, top_p=0.99, frequency_penalty=1.2, presence_penalty=0.0
)
"""What AgentFlow's vLLM engine sends for every planner call of its published runs, whatever
temperature its scripts pass: the engine keeps none of the sampling it is built with and the
planner's calls give none, so its per-call defaults hold."""

SAMPLINGS: dict[str, Sampling] = {"agentflow": AGENTFLOW_SAMPLING}
"""Named samplings (``eval --sampling NAME``)."""


class ChatPlanner:
    """A chat model behind a shared backend (e.g. one ``LLMEndpoint`` client for all episodes).

    Each reply may be as long as ``max_tokens``, by default the session's ``max_action_tokens``
    (where the env cuts an action anyway), so a comparison with another setup is not skewed by
    a shorter cap here. ``sampling`` (or ``temperature`` alone) sets the request's sampling.
    """

    def __init__(
        self,
        backend: ChatBackend,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        sampling: Sampling | None = None,
    ) -> None:
        if sampling is not None and temperature is not None:
            raise ValueError("give temperature or sampling, not both")
        self.backend = backend
        self.sampling = sampling or Sampling(temperature=temperature)
        self.max_tokens = max_tokens

    @property
    def temperature(self) -> float | None:
        return self.sampling.temperature

    def reply_cap(self, session: Session) -> int | None:
        """The request's ``max_tokens``: the planner's own, else the session's action cap."""
        return self.max_tokens if self.max_tokens is not None else session.config.max_action_tokens

    async def act(self, session: Session) -> str:
        observation = session.observation
        text = observation.text if observation is not None else ""
        messages = messages_from_observation({"text": text}, _SessionHolder(session))
        sampling = self.sampling
        reply = await self.backend.chat(
            messages,
            temperature=sampling.temperature,
            max_tokens=self.reply_cap(session),
            top_p=sampling.top_p,
            frequency_penalty=sampling.frequency_penalty,
            presence_penalty=sampling.presence_penalty,
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
