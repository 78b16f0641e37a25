"""Episodes on served envs (``agentflow-env serve``) for the drivers and the adapters.

With ``env_url`` (``AGENTFLOW_ENV_URL``) the env work leaves the trainer's process: the batched
driver takes a ``RemoteEnvPool`` where it took an ``EnvPool`` (one ``RemoteEnv`` per live
episode), and ``SharedEnvs.new_session`` gives a ``RemoteSession`` where it gave a ``Session``.
The label goes to the server as a ``TaskSpec`` whose env kwargs are the plan's (the adapter's
beneath the label's own): the server builds the same env and task the pool would have, with its
own tokenizer, which must be the policy's (checked once per process against the server's
fingerprint). Token ids cross as sent and sampled: the trajectories are the ones a local env
keeps, id for id.
"""

from __future__ import annotations

import threading
from typing import Any

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.remote import EnvServers, RemoteEnv, RemoteSession, shared_servers
from agentflow_env.remote.env import check_servers
from agentflow_env.remote.wire import json_safe
from agentflow_env.rollout.labels.plans import ADAPTER_OWNED_SETTINGS, EpisodePlan
from agentflow_env.rollout.labels.shapes import SampleShape
from agentflow_env.rollout.labels.spec import TaskSpec


def served_label(plan: EpisodePlan) -> str:
    """The label a server gets for ``plan``: its env id and task, and every env kwarg of the
    plan but those the server sets itself (observation mode, tokenizer)."""
    kwargs = {**json_safe(dict(plan.base_kwargs)), **dict(plan.label_kwargs)}
    kwargs = {k: v for k, v in kwargs.items() if k not in ADAPTER_OWNED_SETTINGS}
    spec = plan.spec
    return TaskSpec(
        env_id=plan.env_id,
        env_kwargs=kwargs,
        seed=spec.seed,
        task_id=spec.task_id,
        record=spec.record,
    ).to_json()


def reset_options(plan: EpisodePlan, samples: SampleShape) -> dict[str, Any]:
    return {"label": served_label(plan), "samples": samples}


class RemoteEnvPool:
    """Served envs in an ``EnvPool``'s place: what the batched driver asks of one (``envs``,
    one ``RemoteEnv`` per live episode; ``reset``; ``discard``) and, for the token-in-token-out
    drivers, ``new_session``, a ``RemoteSession`` per label. The servers at ``urls`` are
    checked against each tokenizer given (once per tokenizer) before anything runs on them."""

    def __init__(
        self, urls: str, *, token: str | None = None, samples: SampleShape = "flat"
    ) -> None:
        self.servers: EnvServers = shared_servers(urls, token)
        self.samples = samples
        self._checked: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def checked(self, tokenizer: Any = None) -> dict[str, Any]:
        """The servers' description, once they are checked against ``tokenizer`` (any form
        ``resolve_tokenizer`` reads; ``None``: the bundled one)."""
        with self._lock:
            if id(tokenizer) not in self._checked:  # kept with it: its id names it meanwhile
                info = check_servers(self.servers, resolve_tokenizer(tokenizer))
                self._checked[id(tokenizer)] = (tokenizer, info)
            return self._checked[id(tokenizer)][1]

    def envs(self, plan: EpisodePlan, tokenizer: Any = None, count: int = 1) -> list[RemoteEnv]:
        info = self.checked(tokenizer)
        return [
            RemoteEnv(self.servers.urls, token=self.servers.token, server_info=info)
            for _ in range(count)
        ]

    def reset(self, env: RemoteEnv, plan: EpisodePlan) -> dict[str, Any]:
        observation, _ = env.reset(seed=plan.spec.seed, options=reset_options(plan, self.samples))
        return observation

    def discard(self, env: RemoteEnv) -> None:
        env.close()

    def new_session(
        self, plan: EpisodePlan, tokenizer: Any = None, timeout_s: float = 600.0
    ) -> RemoteSession:
        self.checked(tokenizer)
        return RemoteSession(
            self.servers, plan.spec.seed, reset_options(plan, self.samples), timeout_s=timeout_s
        )


async def end_session(session: Any) -> None:
    """Close a remote episode's WebSocket session (a local ``Session`` needs nothing)."""
    if isinstance(session, RemoteSession):
        await session.close()
