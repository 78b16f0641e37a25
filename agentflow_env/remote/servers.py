"""Which served env a new episode goes to: the server with the fewest open sessions.

Like the retriever client's replicas (``agentflow_env.retrieval.remote``): the sessions are
counted on this side (every ``RemoteSession`` of a process shares its ``EnvServers``), equals
take turns, and a server that refused a session or could not be reached rests for a while
(1 s, doubling while it keeps failing, at most 30 s) unless every server does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

_REST_S = 1.0
_MAX_REST_S = 30.0


@dataclass
class _Server:
    url: str
    position: int
    sessions: int = 0
    failures: int = 0
    down_until: float = 0.0


class EnvServers:
    """The env servers of one service: several URLs (a list, or one string of comma-separated
    URLs) serving the same env."""

    def __init__(self, urls: str | Sequence[str], token: str | None = None) -> None:
        self.urls = env_urls(urls)
        self.token = token
        self._servers = [_Server(url, i) for i, url in enumerate(self.urls)]
        self._turn = 0
        self._lock = threading.Lock()

    def order(self) -> list[str]:
        """The servers to try for a new session, best first: fewest sessions, not resting,
        taking turns among equals."""
        with self._lock:
            now = time.monotonic()
            count = len(self._servers)
            self._turn = (self._turn + 1) % count
            turn = self._turn

            def rank(server: _Server) -> tuple[bool, int, int]:
                return server.down_until > now, server.sessions, (server.position - turn) % count

            return [s.url for s in sorted(self._servers, key=rank)]

    def opened(self, url: str) -> None:
        with self._lock:
            server = self._server(url)
            server.sessions += 1
            server.failures = 0
            server.down_until = 0.0

    def closed(self, url: str) -> None:
        with self._lock:
            server = self._server(url)
            server.sessions = max(0, server.sessions - 1)

    def failed(self, url: str) -> None:
        with self._lock:
            server = self._server(url)
            server.failures += 1
            rest = min(_MAX_REST_S, _REST_S * 2 ** min(server.failures - 1, 8))
            server.down_until = time.monotonic() + rest

    def sessions(self) -> dict[str, int]:
        """Open sessions per server, as this process counts them."""
        with self._lock:
            return {s.url: s.sessions for s in self._servers}

    def _server(self, url: str) -> _Server:
        for server in self._servers:
            if server.url == url:
                return server
        raise KeyError(url)


def env_urls(value: str | Sequence[str]) -> list[str]:
    """The env server URLs of a comma-separated string or a list (``http://`` or ``ws://``)."""
    items = [value] if isinstance(value, str) else list(value)
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"env server URLs are strings, got {item!r:.60}")
        for url in (part.strip().rstrip("/") for part in item.split(",")):
            if not url:
                continue
            if not url.startswith(("http://", "https://", "ws://", "wss://")):
                raise ValueError(
                    f"an env server URL starts with http://, https://, ws:// or wss://: {url!r}"
                )
            urls.append(url)
    if not urls:
        raise ValueError("no env server URL given")
    return urls


_SHARED: dict[tuple[tuple[str, ...], str | None], EnvServers] = {}
_SHARED_LOCK = threading.Lock()


def shared_servers(urls: str | Sequence[str], token: str | None = None) -> EnvServers:
    """The process's ``EnvServers`` for these URLs (one count of sessions per service)."""
    key = (tuple(env_urls(urls)), token)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = EnvServers(list(key[0]), token)
        return _SHARED[key]
