"""``RemoteEnv``: the Gymnasium env of a served variant.

``reset`` and ``step`` return what ``gym.make(env_id, **settings)`` returns in process (the
observation ``{"text", "token_ids"}``, the reward, the end flags, the info), for the same seeds
and actions, the same token ids. Each episode is a ``RemoteSession`` on the server with the fewest
open sessions. A ``tokenizer`` given (any form ``resolve_tokenizer`` reads: the policy's) is
checked against every server's before anything runs: ids from two tokenizers never mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import httpx
from gymnasium import spaces

from agentflow_env.base.hf_tokens import resolve_tokenizer
from agentflow_env.base.loop_runner import BackgroundLoop
from agentflow_env.base.spaces import AnyText, PlannerActionSpace, TokenIds
from agentflow_env.remote.connection import ServiceUnavailable
from agentflow_env.remote.servers import EnvServers, shared_servers
from agentflow_env.remote.session import RemoteSession
from agentflow_env.remote.wire import tokenizer_fingerprint
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.trajectory import Trajectory

CLIENT_LOOP = BackgroundLoop("agentflow-remote-envs")
"""The loop every ``RemoteEnv`` of the process runs its sessions on: it runs between calls, so
the WebSockets answer their servers' pings while the caller generates."""


def fetch_server_info(
    url: str, token: str | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """A server's ``GET /agentflow``: its variant, settings, tokenizer fingerprint and session
    counts; ``ServiceUnavailable`` when it does not answer."""
    http = url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(
            http + "/agentflow", headers=headers, timeout=timeout_s, trust_env=False
        )
        response.raise_for_status()
        info = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise ServiceUnavailable("UNREACHABLE", f"GET /agentflow: {error}", url) from error
    if not isinstance(info, dict) or "tokenizer_fingerprint" not in info:
        raise ServiceUnavailable("BAD_ANSWER", "not an agentflow-env server", url)
    return info


def check_servers(
    servers: EnvServers, tokenizer: Any = None, env_id: str | None = None
) -> dict[str, Any]:
    """The first server's description, after checking that every server serves the same
    variant with the same tokenizer (and ``env_id``, and ``tokenizer``'s, when given)."""
    infos = {url: fetch_server_info(url, servers.token) for url in servers.urls}
    first_url, first = next(iter(infos.items()))
    for url, info in infos.items():
        for key in ("env_id", "tokenizer_fingerprint", "observation_mode"):
            if info[key] != first[key]:
                raise ValueError(
                    f"{url} serves {key}={info[key]!r} but {first_url} serves {first[key]!r}: "
                    "the servers of one service must serve the same env"
                )
    if env_id is not None and first["env_id"] != env_id:
        raise ValueError(f"the servers serve {first['env_id']}, not {env_id}")
    if tokenizer is not None:
        local = resolve_tokenizer(tokenizer)
        if tokenizer_fingerprint(local) != first["tokenizer_fingerprint"]:
            raise ValueError(
                f"the servers tokenize with {first['tokenizer']!r}, which encodes differently "
                f"from {local.name!r}: serve the env with the policy's tokenizer "
                "(agentflow-env serve ... --tokenizer PATH)"
            )
    return first


class RemoteEnv(gym.Env[dict[str, Any], Any]):
    """A served variant as a Gymnasium env.

    Args:
        url: the server (``http://host:port``), or several (a list, or comma-separated): each
            episode goes to the one with the fewest open sessions.
        token: the servers' bearer token, if they ask for one.
        tokenizer: the policy's tokenizer, checked against the servers'.
        timeout_s: how long one step may take before the episode fails.
        messages: also receive each prompt's plain chat messages (``session.messages()``).
        server_info: the servers' description when already checked (``check_servers``): many
            envs of one service skip asking again.

    ``reset(seed=None)`` draws the episode's seed from the env's own generator (seeded by the
    last ``reset(seed=...)``), so a seeded sequence of resets repeats. ``state()`` is the served
    session's state (its privileged ``expert_action`` for scripted planners). A server that dies
    mid-episode makes ``step`` raise ``ServiceUnavailable``; the next ``reset`` goes elsewhere.
    Every ``RemoteEnv`` of a process runs on one background loop (``CLIENT_LOOP``), which keeps
    idle sessions alive; ``end_episode`` frees a finished episode's session at once.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        tokenizer: Any = None,
        timeout_s: float = 600.0,
        messages: bool = False,
        server_info: dict[str, Any] | None = None,
    ) -> None:
        self.servers = shared_servers(url, token)
        self.server_info = server_info or check_servers(self.servers, tokenizer)
        self.env_id: str = self.server_info["env_id"]
        vocab = int(self.server_info["vocab_size"])
        self.observation_space = spaces.Dict(
            {
                "text": AnyText(),
                "token_ids": TokenIds(vocab, id_limit=int(self.server_info["token_id_limit"])),
            }
        )
        self.action_space = PlannerActionSpace(vocab, id_limit=MAX_TOKEN_ID + 1)
        self.timeout_s = timeout_s
        self.messages = messages
        self.session: RemoteSession | None = None
        self._runner = CLIENT_LOOP

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        self._end_session()
        options = dict(options or {})
        if self.messages:
            options.setdefault("messages", True)
        self.session = RemoteSession(self.servers, seed, options, timeout_s=self.timeout_s)
        observation, info = self._runner.run(self.session.start())
        return observation.as_gym(), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        session = self.session
        if session is None or session.observation is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if session.done:
            raise gym.error.ResetNeeded("the episode is over: call reset() before step()")
        return self._runner.run(session.step(action)).as_gym()

    def trajectory(self) -> Trajectory:
        """The current episode's exact turn records, as the server kept them."""
        if self.session is None:
            raise gym.error.ResetNeeded("no episode yet: call reset()")
        return self.session.trajectory()

    def state(self) -> dict[str, Any]:
        """The served session's state (OpenEnv's ``state`` message)."""
        if self.session is None:
            raise gym.error.ResetNeeded("no episode yet: call reset()")
        return self._runner.run(self.session.state())

    def end_episode(self) -> None:
        """End the current episode's session now (its server frees the env); the next
        ``reset`` opens another. ``close`` does the same."""
        self._end_session()

    def close(self) -> None:
        self._end_session()
        super().close()

    def _end_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            self._runner.run(session.close())
