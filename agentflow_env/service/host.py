"""What one server process serves: a registered variant with its settings, shared by its
sessions.

The host builds the variant's env once (``gym.make(env_id, **settings)``: an unknown setting or
a bad value stops the server at start, with the env's own message) and every WebSocket session
plays its episodes as ``Session``s of that env, as ``evaluate`` and OpenRLHF's agent do: one
env's tools, frozen modules and tokenizer serve many episodes at once on the server's event
loop. A trainer's label may set other env kwargs; those envs come from an ``EnvPool`` (built once
per kwargs, then shared).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.remote.wire import json_safe, tokenizer_fingerprint
from agentflow_env.rollout.labels.plans import ADAPTER_OWNED_SETTINGS, plan_episode
from agentflow_env.rollout.labels.shapes import check_sample_shape
from agentflow_env.rollout.labels.spec import TaskSpecError
from agentflow_env.rollout.training.pool import EnvPool
from agentflow_env.tasks.base import Task

logger = logging.getLogger("agentflow_env.service")


class EnvHost:
    """The served variant (``env_id`` with ``settings``) and the counts of its sessions."""

    def __init__(self, env_id: str, settings: Mapping[str, Any] | None = None) -> None:
        self.env_id = env_id
        self.settings = dict(settings or {})
        env = gym.make(env_id, **self.settings).unwrapped
        if not isinstance(env, AgentFlowEnv):
            raise TypeError(f"{env_id} is not an AgentFlow env")
        self.env: AgentFlowEnv = env
        self.pool = EnvPool(tokenizer=env.tokenizer)
        self.fingerprint = tokenizer_fingerprint(env.tokenizer)
        self._lock = threading.Lock()
        self.active_sessions = 0
        self.sessions_ended = 0
        self.episodes_started = 0

    def describe(self) -> dict[str, Any]:
        """What a client checks before it plays: the variant, its settings, the tokenizer."""
        env = self.env
        return {
            "env_id": self.env_id,
            "settings": json_safe(self.settings),
            "observation_mode": env.session_config.observation_mode,
            "tokenizer": env.tokenizer.name,
            "tokenizer_fingerprint": self.fingerprint,
            "vocab_size": env.tokenizer.vocab_size,
            "token_id_limit": env.observation_space["token_ids"].id_limit,  # type: ignore[index]
            "active_sessions": self.active_sessions,
            "sessions_ended": self.sessions_ended,
            "episodes_started": self.episodes_started,
        }

    def label_episode(self, label: Any, samples: str) -> tuple[AgentFlowEnv, Task, int | None]:
        """The env, task and seed a trainer's label names, under the server's settings (a
        label may set the variant's kwargs, not the tokenizer or observation mode, and must name
        this server's variant)."""
        shape = check_sample_shape(samples)
        base = {k: v for k, v in self.settings.items() if k not in ADAPTER_OWNED_SETTINGS}
        plan = plan_episode(label, env_id=self.env_id, env_kwargs=base, samples=shape)
        if plan.env_id != self.env_id:
            raise TaskSpecError(f"this server serves {self.env_id}, the label names {plan.env_id}")
        env = self.pool.env(plan)
        return env, self.pool.task(plan, env), plan.spec.seed

    def opened(self) -> None:
        with self._lock:
            self.active_sessions += 1

    def closed(self) -> None:
        with self._lock:
            self.active_sessions = max(0, self.active_sessions - 1)
            self.sessions_ended += 1

    def started_episode(self) -> None:
        with self._lock:
            self.episodes_started += 1
