"""One WebSocket session with a served env, through OpenEnv's own client (``EnvClient``).

The ``serve`` extra installs OpenEnv (``openenv-core``); it is imported on first use, so the core
package keeps its light install. What is added to OpenEnv's client: an optional bearer token on
the handshake, no proxy for the connection, and the server's error answers raised as
``ServiceError`` with their OpenEnv code (``CAPACITY_REACHED``, ``VALIDATION_ERROR``, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

SERVE_EXTRA_HINT = "the env service needs OpenEnv: pip install 'agentflow-env[serve]'"


class ServiceError(RuntimeError):
    """The served env answered with an error (the session lives on unless ``code`` says the
    session could not be made: ``CAPACITY_REACHED``, ``FACTORY_ERROR``, ``SESSION_ERROR``)."""

    def __init__(self, code: str, message: str, url: str = "") -> None:
        super().__init__(f"{url or 'the env server'} answered {code}: {message}")
        self.code = code
        self.detail = message
        self.url = url


class ServiceUnavailable(ServiceError):
    """No server could be reached, or the connection broke mid-episode."""


REFUSED_SESSION_CODES = frozenset({"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"})


def _openenv_client_class() -> Any:
    try:
        from openenv.core.env_client import EnvClient
    except ImportError as error:  # pragma: no cover - the serve extra is installed in CI
        raise ImportError(SERVE_EXTRA_HINT) from error
    return EnvClient


def open_connection(
    url: str, *, token: str | None = None, timeout_s: float = 600.0, connect_timeout_s: float = 10.0
) -> Connection:
    """A not yet connected session with the server at ``url`` (``http://`` or ``ws://``)."""
    return Connection(url, token=token, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)


class Connection:
    """A raw-message OpenEnv session: ``await request({"type": "reset", "data": ...})``."""

    def __init__(
        self, url: str, *, token: str | None, timeout_s: float, connect_timeout_s: float
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.client = _client_class()(
            base_url=self.url, connect_timeout_s=connect_timeout_s, message_timeout_s=timeout_s
        )
        self.client.token = token

    async def connect(self) -> None:
        try:
            await self.client.connect()
        except ConnectionError as error:
            raise ServiceUnavailable("UNREACHABLE", str(error), self.url) from error

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; the answer's ``data``, or ``ServiceError`` for an error answer."""
        try:
            try:
                await self.client._send(message)
            except Exception:
                # A server refusing the session (its cap) answers, then closes, often before our
                # first message goes out: its answer still waits to be read.
                answer = await self._left_answer()
                if answer is None:
                    raise
            else:
                answer = await self.client._receive()
        except (asyncio.TimeoutError, TimeoutError) as error:
            raise ServiceUnavailable(
                "TIMEOUT", f"no answer to {message.get('type')}", self.url
            ) from error
        except (OSError, RuntimeError, json.JSONDecodeError) as error:
            raise ServiceUnavailable("CONNECTION_LOST", repr(error), self.url) from error
        except Exception as error:  # websockets' ConnectionClosed and its kin
            raise ServiceUnavailable("CONNECTION_LOST", repr(error), self.url) from error
        if not isinstance(answer, dict):
            raise ServiceError("BAD_ANSWER", f"not a JSON object: {answer!r:.200}", self.url)
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            raise ServiceError(
                str(data.get("code", "UNKNOWN")), str(data.get("message", "")), self.url
            )
        data = answer.get("data")
        if not isinstance(data, dict):
            raise ServiceError("BAD_ANSWER", f"no data object: {answer!r:.200}", self.url)
        return data

    async def _left_answer(self) -> Any:
        """An answer the server sent before its connection closed, else ``None``."""
        ws = self.client._ws
        if ws is None:
            return None
        try:
            return json.loads(await asyncio.wait_for(ws.recv(), timeout=1.0))
        except Exception:  # nothing was left, or it was not JSON
            return None

    async def close(self) -> None:
        # A plain close, not OpenEnv's "close" message first: its server then closes a socket the
        # client already closed, and logs that as an error.
        ws, self.client._ws = self.client._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):  # a connection already gone closes quietly
                await ws.close()


_CLIENT_CLASS: Any = None


def _client_class() -> Any:
    """OpenEnv's ``EnvClient`` with raw dict payloads and the token on the handshake."""
    global _CLIENT_CLASS
    if _CLIENT_CLASS is not None:
        return _CLIENT_CLASS
    base = _openenv_client_class()
    from websockets.asyncio.client import connect as ws_connect

    class AgentFlowEnvClient(base):  # type: ignore[misc,valid-type]
        token: str | None = None

        async def connect(self) -> Any:
            if self._ws is not None:  # type: ignore[has-type]
                return self
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
            try:
                self._ws = await ws_connect(
                    self._ws_url,
                    open_timeout=self._connect_timeout,
                    max_size=self._max_message_size,
                    additional_headers=headers,
                    proxy=None,
                    # No per-message compression: on the links env servers sit on, deflating
                    # an answer costs more than sending it (bench/service.py).
                    compression=None,
                )
            except Exception as error:
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {error}") from error
            return self

        def _step_payload(self, action: Any) -> dict[str, Any]:
            return dict(action)

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            return payload

        def _parse_state(self, payload: dict[str, Any]) -> Any:
            return payload

    _CLIENT_CLASS = AgentFlowEnvClient
    return _CLIENT_CLASS
