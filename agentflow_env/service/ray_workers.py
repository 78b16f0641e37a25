"""Env servers as Ray actors across a cluster (``agentflow-env serve --ray --replicas N``).

Each ``EnvServerActor`` builds an ``EnvHost`` and serves it with uvicorn in a background thread,
on a free port of its node; Ray restarts an actor that dies (its process, not its node's tools),
and the restarted one serves on a new port, so ``EnvServerGroup.refresh()`` re-asks the actors
for their URLs. Clients (``RemoteEnv``, ``EnvServers``) skip a server that stops answering.

Where a server binds: the env runs planner-chosen tools, so it never serves off loopback without
a token. With ``bind`` loopback (the default), an actor on the driver's own machine binds
127.0.0.1; an actor on another node binds its node's IP, and only when a ``token`` is given
(without one it refuses to start). ``bind="0.0.0.0"`` (or another address) always needs a token.
Every node needs this package installed (or a Ray ``runtime_env`` that brings it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from agentflow_env.service.app import is_loopback

_ANY = ("0.0.0.0", "::", "")


def bind_address(bind: str, node_ip: str, driver_ip: str | None, token: str | None) -> str:
    """The address an actor on ``node_ip`` binds for ``bind`` (see the module's docstring);
    ``ValueError`` when that would expose the env off loopback without a token."""
    local = is_loopback(node_ip) or node_ip == driver_ip
    if is_loopback(bind) and local:
        return bind
    if not token:
        where = f"{node_ip} (an env server on a node other than the driver's)"
        raise ValueError(
            f"binding {where if is_loopback(bind) else bind} exposes planner-chosen tools to "
            "other hosts: give a token (--token or AGENTFLOW_SERVE_TOKEN)"
        )
    return node_ip if is_loopback(bind) else bind


class EnvServerActor:
    """One env server in a Ray actor: started in ``__init__`` (so a restart starts it again);
    a start that failed is raised by ``url()``."""

    def __init__(
        self, env_id: str, settings: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        import ray

        self._url: str | None = None
        self._error: Exception | None = None
        self.server: Any = None
        self.node_id = ray.get_runtime_context().get_node_id()
        try:
            self._start(env_id, dict(settings), dict(options), ray.util.get_node_ip_address())
        except Exception as error:  # kept for url(): Ray raises it on the caller's side
            self._error = error

    def _start(
        self, env_id: str, settings: dict[str, Any], options: dict[str, Any], node_ip: str
    ) -> None:
        import uvicorn

        from agentflow_env.service.app import make_app
        from agentflow_env.service.host import EnvHost

        token = options["token"]
        address = bind_address(options["bind"], node_ip, options["driver_ip"], token)
        app = make_app(
            EnvHost(env_id, settings),
            max_sessions=options["max_sessions"],
            session_timeout_s=options["session_timeout_s"],
            token=token,
        )
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            app,
            log_level=options["log_level"],
            ws_ping_interval=options["ping_s"],
            ws_ping_timeout=options["ping_s"],
            ws_max_size=100 * 1024 * 1024,
        )
        self.server = server = uvicorn.Server(config)
        thread = threading.Thread(target=_serve, args=(server, sock), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the env server on {address}:{port} did not start")
            time.sleep(0.02)
        shown = node_ip if address in _ANY else address
        self._url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"

    def url(self) -> str:
        """The server's URL, once it answers (raises what stopped it from starting)."""
        if self._error is not None:
            raise self._error
        assert self._url is not None
        return self._url

    def describe(self) -> dict[str, Any]:
        """The URL (``None`` until started) and the Ray node the server runs on."""
        return {"url": self._url, "node_id": self.node_id}


def _serve(server: Any, sock: socket.socket) -> None:
    """Run ``server``; should it stop after it started, end the actor's process so that Ray
    restarts it (an actor must not outlive its server)."""
    server.run(sockets=[sock])
    if server.started:
        os._exit(1)


class EnvServerGroup:
    """The actors of ``start_env_servers`` and their URLs as of the start or the last
    ``refresh``: ``actor_urls`` (one per actor, ``None`` for one that did not answer) and
    ``urls`` (those that did)."""

    def __init__(self, actors: list[Any], urls: list[str | None]) -> None:
        self.actors = actors
        self.actor_urls = urls

    @property
    def urls(self) -> list[str]:
        return [url for url in self.actor_urls if url is not None]

    def refresh(self, timeout_s: float = 30.0) -> list[str]:
        """Re-ask every actor for its URL (a restarted one serves on a new port), waiting up to
        ``timeout_s`` in all for actors Ray is restarting; an actor that is dead for good,
        failed to start, or is not back in time is left out."""
        deadline = time.monotonic() + timeout_s
        self.actor_urls = [_ask_url(actor, deadline) for actor in self.actors]
        return self.urls

    def kill(self, index: int, *, restart: bool = True) -> None:
        """Kill actor ``index``'s process (Ray restarts it unless ``restart`` is false)."""
        import ray

        ray.kill(self.actors[index], no_restart=not restart)

    def stop(self) -> None:
        """Kill every actor for good."""
        import ray

        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        self.actor_urls = [None] * len(self.actors)


def _ask_url(actor: Any, deadline: float) -> str | None:
    """The actor's URL, or ``None``. While Ray restarts an actor, calls fail with
    ``ActorUnavailableError`` (asked again until ``deadline``); a call in flight when it died
    fails with ``ActorDiedError`` (asked once more: a dead-for-good actor answers that at once)."""
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    died = 0
    while True:
        try:
            return str(ray.get(actor.url.remote(), timeout=max(0.1, deadline - time.monotonic())))
        except ActorUnavailableError:
            pass
        except ActorDiedError:
            died += 1
            if died > 1:
                return None
        except Exception:  # not back in time (GetTimeoutError), or its start failed
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def start_env_servers(
    env_id: str,
    settings: Mapping[str, Any],
    replicas: int,
    *,
    bind: str = "127.0.0.1",
    address: str | None = None,
    max_sessions: int = 64,
    session_timeout_s: float | None = 600.0,
    token: str | None = None,
    num_cpus: float = 1.0,
    max_restarts: int = -1,
    ping_s: float = 10.0,
    log_level: str = "warning",
    start_timeout_s: float = 300.0,
) -> EnvServerGroup:
    """Start ``replicas`` env servers of ``env_id`` with ``settings`` as Ray actors, spread over
    the cluster's nodes, and return them once every one answers (else stop them all and raise
    what stopped the first that failed). Joins the cluster at ``address`` (default: the running
    one, else a new local one) unless Ray is already initialised. An actor reserves ``num_cpus``;
    Ray restarts it up to ``max_restarts`` times (-1: always) and retries no call on it."""
    import ray

    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    if not ray.is_initialized():
        if address is not None:
            ray.init(address=address)
        else:
            try:
                ray.init(address="auto")
            except ConnectionError:  # no cluster running: a local one
                ray.init()
    options = {
        "bind": bind,
        "driver_ip": ray.util.get_node_ip_address(),
        "token": token,
        "max_sessions": max_sessions,
        "session_timeout_s": session_timeout_s,
        "ping_s": ping_s,
        "log_level": log_level,
    }
    actor_class = ray.remote(EnvServerActor).options(
        num_cpus=num_cpus,
        max_restarts=max_restarts,
        max_task_retries=0,
        scheduling_strategy="SPREAD",
    )
    group = EnvServerGroup(
        [actor_class.remote(env_id, dict(settings), options) for _ in range(replicas)], []
    )
    try:
        urls = ray.get([actor.url.remote() for actor in group.actors], timeout=start_timeout_s)
    except BaseException:
        group.stop()
        raise
    group.actor_urls = list(urls)
    return group
