"""``RemoteSession``: one episode on a served env, shaped like a ``Session``.

What the trainer-facing code reads of a ``Session`` (``start``, ``step``, ``done``,
``observation``, ``outcome``, ``metrics``, ``service_errors``, ``turn_records``,
``trajectory()``, ``config.max_action_tokens``) a ``RemoteSession`` has too, kept from the
server's answers (``agentflow_env.remote.wire``), so that the token-in-token-out drivers and the
failure checks run unchanged on a remote episode. Each episode opens its own WebSocket session,
on the server with the fewest open sessions (``EnvServers``); a server that refuses the session
(at its cap) or cannot be reached is skipped for the next one.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.remote.connection import (
    REFUSED_SESSION_CODES,
    Connection,
    ServiceError,
    ServiceUnavailable,
    open_connection,
)
from agentflow_env.remote.servers import EnvServers
from agentflow_env.remote.wire import (
    metrics_from_wire,
    outcome_from_wire,
    turn_from_wire,
)
from agentflow_env.workflow.observations import Observation
from agentflow_env.workflow.outcome import EpisodeMetrics, EpisodeOutcome
from agentflow_env.workflow.session import StepOutcome
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord


class RemoteSession:
    """One episode on a served env.

    Args:
        servers: where to play it (``EnvServers``; ``shared_servers(urls)`` shares the session
            counts of a process).
        seed: the reset's seed.
        options: the reset's options (``agentflow_env.remote.wire.RESET_OPTIONS``).
        timeout_s: how long one answer may take (a step runs the tools and frozen modules).
    """

    def __init__(
        self,
        servers: EnvServers,
        seed: int | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        timeout_s: float = 600.0,
    ) -> None:
        self.servers = servers
        self.seed = seed
        self.options = dict(options or {})
        self.timeout_s = timeout_s
        self.url: str | None = None
        """The server playing the episode, once started."""
        self.task: dict[str, Any] = {}
        """The task's plain fields (``Task.describe``)."""
        self.episode_id: str | None = None
        self.config = types.SimpleNamespace(max_action_tokens=None, observation_mode="")
        """The served session's settings a driver reads (``max_action_tokens``, ...)."""
        self.last_info: dict[str, Any] = {}
        self._connection: Connection | None = None
        self._observation: Observation | None = None
        self._initial: Observation | None = None
        self._records: list[TurnRecord] = []
        self._metrics = EpisodeMetrics()
        self._outcome: EpisodeOutcome | None = None
        self._service_errors: tuple[str, ...] = ()
        self._done = False

    # -- what a Session shows ----------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done

    @property
    def observation(self) -> Observation | None:
        return self._observation

    @property
    def initial_observation(self) -> Observation | None:
        return self._initial

    @property
    def outcome(self) -> EpisodeOutcome | None:
        return self._outcome

    @property
    def metrics(self) -> EpisodeMetrics:
        return self._metrics

    @property
    def service_errors(self) -> tuple[str, ...]:
        return self._service_errors

    @property
    def turn(self) -> int:
        return len(self._records)

    @property
    def turn_records(self) -> tuple[TurnRecord, ...]:
        return tuple(self._records)

    def trajectory(self) -> Trajectory:
        outcome = self._outcome
        return Trajectory(
            task_id=str(self.task.get("task_id", "")),
            observation_mode=str(self.config.observation_mode),
            turns=list(self._records),
            reward=float(outcome.reward) if outcome else 0.0,
            success=bool(outcome.success) if outcome else False,
            metrics=self._metrics.as_dict(),
        )

    def messages(self) -> list[dict[str, str]]:
        """The current prompt's plain chat messages (the reset must ask: ``messages=True``)."""
        current = self._observation
        return [dict(m) for m in current.messages] if current is not None else []

    # -- the episode -------------------------------------------------------------------------
    async def start(self) -> tuple[Observation, dict[str, Any]]:
        """Open a session on the best server and reset it; ``ServiceUnavailable`` when every
        server refused or could not be reached (each is tried once)."""
        if self._observation is not None:
            return self._observation, dict(self.last_info)
        data: dict[str, Any] = {"options": self.options}
        if self.seed is not None:
            data["seed"] = self.seed
        problems: list[str] = []
        for url in self.servers.order():
            connection = open_connection(url, token=self.servers.token, timeout_s=self.timeout_s)
            try:
                await connection.connect()
                answer = await connection.request({"type": "reset", "data": data})
            except ServiceError as error:
                await connection.close()
                if (
                    not isinstance(error, ServiceUnavailable)
                    and error.code not in REFUSED_SESSION_CODES
                ):
                    raise  # the reset itself was refused (a bad option): no other server helps
                self.servers.failed(url)
                problems.append(str(error))
                continue
            self._connection, self.url = connection, url
            self.servers.opened(url)
            return self._started(answer)
        raise ServiceUnavailable(
            "NO_SERVER", "; ".join(problems) or "no server", ",".join(self.servers.urls)
        )

    async def step(self, action: Any, logprobs: Sequence[float] | None = None) -> StepOutcome:
        """One planner turn: ``action`` is text or token ids (``logprobs`` beside ids)."""
        if self._connection is None or self._observation is None:
            raise RuntimeError("start() the remote session before step()")
        if self._done:
            raise RuntimeError("the episode is over")
        payload = action_payload(action, logprobs)
        prompt_ids = list(self._observation.token_ids)
        try:
            answer = await self._connection.request({"type": "step", "data": payload})
        except ServiceUnavailable:
            if self.url is not None:  # the next episode tries another server first
                self.servers.failed(self.url)
            raise
        observation = _observation(answer.get("observation", {}))
        turn = answer.get("observation", {}).get("turn")
        if turn is not None:
            self._records.append(turn_from_wire(turn, prompt_ids))
        fields = answer.get("observation", {})
        self._read_progress(fields)
        self._observation = observation
        info = dict(fields.get("info") or {})
        self.last_info = info
        feedback_ids = [int(i) for i in info.get("feedback_token_ids", []) or []]
        return StepOutcome(
            observation=observation,
            reward=float(answer.get("reward") or 0.0),
            terminated=bool(fields.get("terminated", False)),
            truncated=bool(fields.get("truncated", False)),
            info=info,
            feedback=Observation(str(fields.get("feedback_text", "")), feedback_ids),
        )

    async def state(self) -> dict[str, Any]:
        """The served session's state (OpenEnv's ``state``: the turn, and for scripted
        planners the privileged ``expert_action``)."""
        if self._connection is None:
            raise RuntimeError("start() the remote session before state()")
        return await self._connection.request({"type": "state"})

    async def close(self) -> None:
        """End the WebSocket session (the server frees its env)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
            if self.url is not None:
                self.servers.closed(self.url)

    # -- reading answers ---------------------------------------------------------------------
    def _started(self, answer: Mapping[str, Any]) -> tuple[Observation, dict[str, Any]]:
        fields = answer.get("observation", {})
        self.task = dict(fields.get("task") or {})
        self.episode_id = fields.get("episode_id")
        settings = dict(fields.get("session_config") or {})
        self.config = types.SimpleNamespace(
            max_action_tokens=settings.get("max_action_tokens"),
            observation_mode=settings.get("observation_mode", ""),
            termination=settings.get("termination"),
        )
        observation = _observation(fields)
        self._observation = self._initial = observation
        self._read_progress(fields)
        self.last_info = dict(fields.get("info") or {})
        return observation, dict(self.last_info)

    def _read_progress(self, fields: Mapping[str, Any]) -> None:
        if fields.get("metrics"):
            self._metrics = metrics_from_wire(fields["metrics"])
        end = fields.get("end")
        if end:
            self._done = True
            self._outcome = outcome_from_wire(end["outcome"])
            self._service_errors = tuple(end.get("service_errors", ()))


def action_payload(action: Any, logprobs: Sequence[float] | None = None) -> dict[str, Any]:
    """A step's action as sent: ``{"text"}`` or ``{"token_ids", "logprobs"}``; a mapping with
    ``token_ids`` (the in-process env's third form) passes its log-probs on."""
    if isinstance(action, str):
        return {"text": action}
    if isinstance(action, Mapping):
        ids = action.get("token_ids")
        if ids is None:
            raise TypeError("an action mapping carries token_ids (and optional logprobs)")
        logprobs = action.get("logprobs", logprobs)
        action = ids
    payload: dict[str, Any] = {"token_ids": [int(i) for i in action]}
    if logprobs is not None:
        payload["logprobs"] = [float(x) for x in logprobs]
    return payload


def _observation(fields: Mapping[str, Any]) -> Observation:
    messages = tuple(dict(m) for m in fields.get("messages") or ())
    return Observation(str(fields.get("text", "")), list(fields.get("token_ids", ())), messages)
