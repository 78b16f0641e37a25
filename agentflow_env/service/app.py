"""The env server: OpenEnv's app (``create_fastapi_app``) around an ``EnvHost``.

OpenEnv gives the protocol: ``/ws`` (one WebSocket session per client, each its own
``ServedAgentFlowEnv``, at most ``max_sessions`` at once: past the cap a new session is refused
with ``CAPACITY_REACHED``), ``/health``, ``/metadata``, ``/schema``, and the stateless ``/reset``
and ``/step`` (a new env per request, as OpenEnv serves them). Added here:

- ``GET /agentflow``: the variant, its settings, the tokenizer's fingerprint and the session
  counts (what ``RemoteEnv`` checks before it plays);
- an optional bearer token (``token``): every request but ``/health`` must carry
  ``Authorization: Bearer TOKEN``, WebSocket handshakes included;
- idle sessions end after ``session_timeout_s`` (a client that vanished without closing), and
  uvicorn's WebSocket pings find a dead peer within ``ping_s`` seconds twice over.
"""

from __future__ import annotations

import contextlib
import hmac
import importlib.metadata
import ipaddress
import logging
from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata
from starlette.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from agentflow_env.service.host import EnvHost
from agentflow_env.service.models import AgentFlowAction, AgentFlowObservation
from agentflow_env.service.served_env import NoEpisode, ServedAgentFlowEnv

logger = logging.getLogger("agentflow_env.service")

DEFAULT_MAX_SESSIONS = 64
DEFAULT_SESSION_TIMEOUT_S = 600.0


def make_app(
    host: EnvHost,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
    token: str | None = None,
) -> Any:
    """The ASGI app serving ``host``'s variant."""
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")

    def served_env() -> ServedAgentFlowEnv:
        env = ServedAgentFlowEnv(host)
        env.get_metadata = lambda: _metadata(host)
        return env

    app = create_fastapi_app(
        served_env,
        AgentFlowAction,
        AgentFlowObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout_s
        ),
    )
    app.title = f"agentflow-env: {host.env_id}"

    @app.exception_handler(NoEpisode)
    async def no_episode(request: Any, error: NoEpisode) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.get("/agentflow", tags=["Environment Info"], summary="The served variant")
    def agentflow_info() -> dict[str, Any]:
        return {**host.describe(), "max_sessions": max_sessions}

    quiet = QuietDisconnects(app)
    if token:
        return BearerToken(quiet, token)
    return quiet


class QuietDisconnects:
    """ASGI middleware: a WebSocket that the client closed first ends quietly. (OpenEnv's
    handler closes the socket again after the client's close, which Starlette raises as a
    ``WebSocketDisconnect`` that would be logged as an application error.)"""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # the wrapped app's routes, state, ...
        return getattr(self.app, name)

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        with contextlib.suppress(WebSocketDisconnect):
            await self.app(scope, receive, send)


def _metadata(host: EnvHost) -> EnvironmentMetadata:
    try:
        version = importlib.metadata.version("agentflow-env")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        version = None
    return EnvironmentMetadata(
        name=host.env_id,
        description="AgentFlow's workflow with the planner as the agent (agentflow-env)",
        version=version,
        documentation_url="https://agentflow.stanford.edu/",
    )


class BearerToken:
    """ASGI middleware: every HTTP request and WebSocket handshake but ``/health`` must carry
    ``Authorization: Bearer TOKEN`` (403 otherwise)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/health":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is required"})
                return
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    host: EnvHost,
    *,
    bind: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
    token: str | None = None,
    ping_s: float = 10.0,
    log_level: str = "info",
) -> None:
    """Serve ``host`` with uvicorn until interrupted. The env runs planner-chosen tools: off
    loopback it needs a ``token``."""
    import uvicorn

    if not is_loopback(bind) and not token:
        raise ValueError(
            f"binding {bind} exposes planner-chosen tools to other hosts: give a token "
            "(--token or AGENTFLOW_SERVE_TOKEN), or bind 127.0.0.1"
        )
    app = make_app(
        host, max_sessions=max_sessions, session_timeout_s=session_timeout_s, token=token
    )
    uvicorn.run(
        app,
        host=bind,
        port=port,
        log_level=log_level,
        ws_ping_interval=ping_s,
        ws_ping_timeout=ping_s,
        ws_max_size=100 * 1024 * 1024,
    )
