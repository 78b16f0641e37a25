"""``ServedAgentFlowEnv``: the OpenEnv ``Environment`` behind one WebSocket session.

OpenEnv's server makes one per session (its factory is ``EnvHost.new_served_env``) and calls
``reset_async``/``step_async`` on the server's event loop, where the session's episodes run as
``Session``s of the host's shared env. Anything wrong with a message (an unknown reset option, an
action before a reset or after the end, a label naming no task) raises here and OpenEnv answers
it with an error; the session lives on. Every episode's task is drawn exactly as the in-process
env draws it: ``reset(seed=s)`` plays the task ``gym.make(env_id, **settings).reset(seed=s)``
plays, with the same ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from openenv.core.env_server.interfaces import Environment

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.runner import indexed_task
from agentflow_env.remote.wire import RESET_OPTIONS, json_safe, turn_to_wire
from agentflow_env.rollout.agents.planners import expert_session_action
from agentflow_env.rollout.labels.spec import task_by_id
from agentflow_env.service.host import EnvHost
from agentflow_env.service.models import AgentFlowAction, AgentFlowObservation, AgentFlowState
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.observations import Observation
from agentflow_env.workflow.session import Session

logger = logging.getLogger("agentflow_env.service")


class NoEpisode(RuntimeError):
    """A step with no episode to take it: before a reset, after the end, or over OpenEnv's
    stateless HTTP ``/step`` (a new env per request: episodes live on WebSocket sessions)."""


class ServedAgentFlowEnv(Environment[AgentFlowAction, AgentFlowObservation, AgentFlowState]):
    """One client's session: its episodes, one at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, host: EnvHost) -> None:
        super().__init__()
        self.host = host
        self.session: Session | None = None
        self.session_id = uuid.uuid4().hex[:12]
        self.episode_id: str | None = None
        self.steps = 0
        self.episodes = 0
        self.with_messages = False
        self._rng: np.random.Generator | None = None
        self._opened = False

    # -- OpenEnv's Environment ---------------------------------------------------------------
    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> AgentFlowObservation:
        raise RuntimeError("the served env runs on the server's event loop (reset_async)")

    def step(
        self, action: AgentFlowAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentFlowObservation:
        raise RuntimeError("the served env runs on the server's event loop (step_async)")

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **unknown: Any,
    ) -> AgentFlowObservation:
        if unknown:
            raise ValueError(f"unknown reset fields {sorted(unknown)}: seed, episode_id, options")
        options = dict(options or {})
        extra = sorted(set(options) - RESET_OPTIONS)
        if extra:
            raise ValueError(f"unknown reset options {extra}; known: {sorted(RESET_OPTIONS)}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer, got {seed!r:.40}")
        env, task, seed, config = await asyncio.to_thread(self._episode, seed, options)
        self.with_messages = bool(options.get("messages", False))
        if (
            not self._opened
        ):  # counted from its first episode (OpenEnv also builds envs to describe)
            self._opened = True
            self.host.opened()
        session = env.new_session(task, seed=seed, config=config)
        self.session, self.steps = session, 0
        self.episode_id = episode_id or uuid.uuid4().hex
        self.episodes += 1
        self.host.started_episode()
        observation, info = await session.start()
        return self._answer(
            observation,
            0.0,
            session.done,
            False,
            info,
            task=task.describe(),
            episode_id=self.episode_id,
            session_config={
                "max_action_tokens": session.config.max_action_tokens,
                "observation_mode": session.observations.name,
                "termination": session.config.termination,
                "max_turns": session.config.max_turns,
            },
        )

    async def step_async(
        self, action: AgentFlowAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentFlowObservation:
        session = self.session
        if session is None:
            raise NoEpisode(
                "no episode: send a reset first (episodes live on WebSocket sessions, /ws)"
            )
        if session.done:
            raise NoEpisode("the episode is over: send a reset to start another")
        given: Any = action.text
        if action.token_ids is not None:
            given = {"token_ids": action.token_ids, "logprobs": action.logprobs}
        outcome = await session.step(given)
        self.steps += 1
        record = session.turn_records[-1]
        end = None
        if session.done and session.outcome is not None:
            end = {
                "outcome": json_safe(session.outcome.as_info()),
                "service_errors": list(session.service_errors),
            }
        return self._answer(
            outcome.observation,
            float(outcome.reward),
            outcome.terminated,
            outcome.truncated,
            outcome.info,
            turn=turn_to_wire(record),
            end=end,
            feedback_text=outcome.feedback.text,
        )

    @property
    def state(self) -> AgentFlowState:
        session = self.session
        if session is None:
            return AgentFlowState(episode_id=self.episode_id, step_count=0)
        try:
            expert = expert_session_action(session) if not session.done else None
        except ValueError:  # a task with no gold plan has no expert
            expert = None
        return AgentFlowState(
            episode_id=self.episode_id,
            step_count=self.steps,
            turn=session.turn,
            done=session.done,
            task=session.task.describe(),
            expert_action=expert,
        )

    def close(self) -> None:
        if not self._opened:
            return
        self._opened = False
        self.host.closed()
        session = self.session
        last = session.outcome if session is not None else None
        logger.info(
            "session %s ended: %d episode(s), %d step(s) in the last; last episode %s",
            self.session_id,
            self.episodes,
            self.steps,
            "unfinished"
            if session is not None and last is None
            else (f"reward {last.reward:g} ({last.end_reason.value})" if last else "none"),
        )
        self.session = None

    # -- helpers -----------------------------------------------------------------------------
    def _episode(
        self, seed: int | None, options: dict[str, Any]
    ) -> tuple[AgentFlowEnv, Task, int | None, Any]:
        """The env, task, seed and session settings of the reset (blocking: may build envs and
        worlds, so it runs in a worker thread)."""
        env = self.host.env
        config = None
        if "label" in options:
            if "episode_index" in options or "task_id" in options:
                raise ValueError(
                    "a label names its own task: no episode_index or task_id beside it"
                )
            env, task, label_seed = self.host.label_episode(
                options["label"], str(options.get("samples", "flat"))
            )
            return env, task, label_seed, None
        if "episode_index" in options:
            index = options["episode_index"]
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(f"episode_index must be an integer >= 0, got {index!r:.40}")
            if seed is None:
                raise ValueError("an episode_index goes with its episode's seed")
            task = indexed_task(env, index, seed)
            if "budget_curve" in options:
                config = dataclasses.replace(
                    env.session_config, budget_curve=bool(options["budget_curve"])
                )
            return env, task, seed, config
        if "task_id" in options:
            return env, task_by_id(env.task_source, str(options["task_id"])), seed, None
        if seed is not None or self._rng is None:  # as gymnasium's Env.reset seeds np_random
            self._rng, _ = seeding.np_random(seed)
        return env, env.task_source.sample(self._rng), seed, None

    def _answer(
        self,
        observation: Observation,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
        **fields: Any,
    ) -> AgentFlowObservation:
        session = self.session
        return AgentFlowObservation(
            text=observation.text,
            token_ids=list(observation.token_ids),
            reward=reward,
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=json_safe(info),
            metrics=session.metrics.as_dict() if session is not None else {},
            messages=[dict(m) for m in session.messages()]
            if self.with_messages and session is not None
            else None,
            **fields,
        )
