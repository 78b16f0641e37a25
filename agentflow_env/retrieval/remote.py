"""An async client for Search-R1 style retriever servers (``POST /retrieve``), with retries
and replicas.

Works with ``agentflow-env serve-retriever`` and with Search-R1's / FlashRAG's own servers.
Several URLs (a list, or one string of comma-separated URLs) are replicas of one retriever:
each request goes to the replica with the fewest requests in flight (round robin among equals),
and one that fails (connection error, timeout, 429 or 5xx) is retried at once on another; a
replica that failed is skipped for a while (1 s, doubling while it keeps failing, at most 30 s)
unless every replica is.

HTTP goes through aiohttp: one ``ClientSession`` per event loop (a session is bound to the loop
that made it; ``LoopSessions``, as the LLM client does), whose connector keeps up to 64
connections per replica alive for 4 s. A replica's proxy comes from the environment
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``), read once when the ``RemoteRetriever`` is made:
aiohttp's ``trust_env`` would read it (and ``~/.netrc``) in worker threads at every request,
which more than doubled the client's CPU per request. An env closing its loop closes that loop's
sessions (``close_retrievers``, registered with ``LoopRunner``). aiohttp is imported when the
first request is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentflow_env.base.http import RETRYABLE_STATUS, Unreachable
from agentflow_env.base.loop_runner import on_loop_close
from agentflow_env.base.loop_sessions import LoopSessions
from agentflow_env.retrieval.bm25 import Hit
from agentflow_env.retrieval.corpus import Document

if TYPE_CHECKING:
    import aiohttp

_COOLDOWN_S = 1.0
_MAX_COOLDOWN_S = 30.0
_MAX_CONNECTIONS = 64  # per replica and event loop
# An idle connection older than this is closed, not reused: below the 5 s after which uvicorn
# (Search-R1's server) closes it, so the client lets go of a connection first.
_KEEPALIVE_S = 4.0
_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
# json.dumps(body, ensure_ascii=False, separators=(",", ":")), without an encoder per call.
_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_HAS_TIMEOUT = sys.version_info >= (3, 11)  # asyncio.timeout: a deadline without a task


class RetrieverError(RuntimeError):
    """The retriever refused the request or answered something that is not Search-R1's format."""


class RetrieverUnavailable(RetrieverError):
    """The retriever could not be reached (connection errors, timeouts, 5xx) after every try."""


def retriever_urls(value: str | Sequence[str]) -> list[str]:
    """The retriever URLs in ``value``: one URL, comma-separated URLs, or a list of those.

    Blank items are skipped (``""`` gives no URL at all); each URL must start with ``http://``
    or ``https://`` (``ValueError`` otherwise).
    """
    items = [value] if isinstance(value, str) else list(value)
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"retriever URLs are strings, got {item!r:.60}")
        for url in (part.strip() for part in item.split(",")):
            if not url:
                continue
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"retriever URL must start with http:// or https://, got {url!r}")
            urls.append(url)
    return urls


@dataclass
class _Replica:
    """One retriever server and how it has been doing."""

    url: str
    position: int
    in_flight: int = 0
    failures: int = 0  # in a row
    down_until: float = 0.0
    proxy: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.proxy = _env_proxy(self.endpoint)

    @property
    def endpoint(self) -> str:
        return self.url + "/retrieve"


def _env_proxy(url: str) -> str | None:
    """The proxy that the environment names for ``url`` (``HTTP_PROXY`` or ``HTTPS_PROXY`` by
    its scheme), unless ``NO_PROXY`` excepts its host: as aiohttp's ``trust_env`` reads them."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return str(proxy)


@dataclass
class _Answer:
    """An HTTP answer (status and body), read in full."""

    status_code: int
    content: bytes
    charset: str = "utf-8"

    @property
    def text(self) -> str:
        try:
            return self.content.decode(self.charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class RemoteRetriever:
    """Searches a remote corpus; one instance can serve many event loops and threads.

    Args:
        url: the server's base URL (``http://host:port``) or its ``/retrieve`` endpoint; or
            several replicas: a list of them, or one string of comma-separated URLs.
        timeout_s: limit for one try (connecting, sending, the whole answer).
        max_retries: further tries after the first on connection errors, timeouts, 429 and 5xx,
            waiting ``backoff_s``, then twice as long each time (at most ``max_backoff_s``).
            With replicas, a failed try is first retried at once on each other replica (these
            tries come on top of ``max_retries``); the waits come between rounds.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        timeout_s: float = 5.0,
        max_retries: int = 2,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
    ) -> None:
        urls = retriever_urls(url)
        if not urls:
            raise ValueError(f"retriever URL must start with http:// or https://, got {url!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        self.replicas = [
            _Replica(u.rstrip("/").removesuffix("/retrieve"), i) for i, u in enumerate(urls)
        ]
        self.urls = [replica.url for replica in self.replicas]
        self.url = self.urls[0]
        self.endpoint = self.replicas[0].endpoint
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sessions = LoopSessions(partial(_open_session, len(self.replicas)))
        self._lock = threading.Lock()
        self._turn = 0
        on_loop_close(close_retrievers)  # envs close their loop's sessions when they close
        _every_retriever.add(self)

    @property
    def tries(self) -> int:
        """Tries per request at most: one per replica, then ``max_retries`` more."""
        return self.max_retries + len(self.replicas)

    def worst_case_s(self) -> float:
        """How long ``search_batch`` may take before giving up (all tries and waits)."""
        waits = sum(self._backoff(attempt) for attempt in range(1, self.max_retries + 1))
        return self.tries * self.timeout_s + waits

    async def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents for ``query`` with their scores, best first."""
        return (await self.search_batch([query], k))[0]

    async def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """One request for many queries. Raises ``RetrieverError`` / ``RetrieverUnavailable``."""
        if not queries:
            return []
        body = {"queries": list(queries), "topk": int(k), "return_scores": True}
        payload, url = await self._post(body)
        return parse_response(payload, len(queries), url)

    async def aclose(self) -> None:
        """Close the connections of the running event loop."""
        await self._sessions.aclose()

    # -- one request, tried on the replicas ------------------------------------------------------
    async def _post(self, body: dict[str, Any]) -> tuple[Any, str]:
        """The JSON answer to ``body`` and the URL of the replica that gave it."""
        data = _to_json(body).encode("utf-8")
        tried: set[int] = set()
        rounds = 0
        problem, failed = "no answer", self.replicas[0]
        for _ in range(self.tries):
            replica = self._pick(tried)
            if replica.position in tried:  # every replica has failed once: wait, then again
                rounds += 1
                await asyncio.sleep(self._backoff(rounds))
            tried.add(replica.position)
            try:
                response = await self._send(replica, data)
            except Unreachable as error:
                self._failed(replica)
                problem, failed = error.problem, replica
                continue
            self._answered(replica)
            return self._payload(response, replica.url), replica.url
        if len(self.replicas) == 1:
            raise RetrieverUnavailable(
                f"retriever at {self.url} unreachable after {self.tries} tries (last: {problem})"
            )
        raise RetrieverUnavailable(
            f"retrievers at {', '.join(self.urls)} unreachable after {self.tries} tries "
            f"(last: {failed.url}: {problem})"
        )

    def _pick(self, tried: set[int]) -> _Replica:
        """The replica for the next try: one not tried yet in this request, not resting after
        failures, with the fewest requests in flight, taking turns among equals."""
        with self._lock:
            now = time.monotonic()
            count = len(self.replicas)
            self._turn = (self._turn + 1) % count
            turn = self._turn

            def rank(replica: _Replica) -> tuple[bool, bool, int, int]:
                resting = replica.down_until > now
                order = (replica.position - turn) % count
                return replica.position in tried, resting, replica.in_flight, order

            return min(self.replicas, key=rank)

    def _failed(self, replica: _Replica) -> None:
        with self._lock:
            replica.failures += 1
            rest = min(_MAX_COOLDOWN_S, _COOLDOWN_S * 2 ** min(replica.failures - 1, 8))
            replica.down_until = time.monotonic() + rest

    def _answered(self, replica: _Replica) -> None:
        with self._lock:
            replica.failures = 0
            replica.down_until = 0.0

    async def _send(self, replica: _Replica, data: bytes) -> _Answer:
        """One try: the answer (a status that is not retried), or ``Unreachable``."""
        import aiohttp

        session = self._sessions.get()
        with self._lock:
            replica.in_flight += 1
        try:
            if _HAS_TIMEOUT:
                async with asyncio.timeout(self.timeout_s):
                    answer = await _exchange(session, replica, data)
            else:  # pragma: no cover - Python 3.10
                answer = await asyncio.wait_for(_exchange(session, replica, data), self.timeout_s)
        except asyncio.TimeoutError:
            raise Unreachable(f"timed out after {self.timeout_s:g} s") from None
        except (aiohttp.ClientError, OSError) as error:
            name = type(error).__name__
            raise Unreachable(f"{name}: {error}" if str(error) else name) from None
        finally:
            with self._lock:
                replica.in_flight -= 1
        if answer.status_code in RETRYABLE_STATUS:
            raise Unreachable(f"HTTP {answer.status_code}: {answer.text[:200]}")
        return answer

    def _payload(self, response: _Answer, url: str) -> Any:
        if response.status_code != 200:
            raise RetrieverError(
                f"retriever at {url} rejected the request: HTTP {response.status_code}: "
                f"{_error_message(response)}"
            )
        try:
            return response.json()
        except ValueError:
            raise RetrieverError(
                f"retriever at {url} answered with non-JSON: {response.text[:200]!r}"
            ) from None

    def _backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))


def _open_session(replicas: int) -> aiohttp.ClientSession:
    """The running event loop's session, for a retriever with ``replicas`` replicas."""
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=_MAX_CONNECTIONS * replicas,
        limit_per_host=_MAX_CONNECTIONS,
        keepalive_timeout=_KEEPALIVE_S,
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers=_HEADERS,
        timeout=aiohttp.ClientTimeout(total=None),  # _send bounds each try
    )


async def _exchange(session: aiohttp.ClientSession, replica: _Replica, data: bytes) -> _Answer:
    """``POST`` ``data`` to ``replica``; sent once more at once when the server closed the
    connection without an answer (a kept-alive connection it closed as the request went out)."""
    import aiohttp

    try:
        return await _post_once(session, replica, data)
    except aiohttp.ClientConnectorError:  # no connection at all
        raise
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        return await _post_once(session, replica, data)


async def _post_once(session: aiohttp.ClientSession, replica: _Replica, data: bytes) -> _Answer:
    async with session.post(replica.endpoint, data=data, proxy=replica.proxy) as response:
        body = await response.read()
        return _Answer(response.status, body, response.charset or "utf-8")


_every_retriever: weakref.WeakSet[RemoteRetriever] = weakref.WeakSet()


async def close_retrievers() -> None:
    """Close every ``RemoteRetriever``'s connections on the running loop; ``LoopRunner`` calls
    it before closing an env's loop."""
    for retriever in list(_every_retriever):
        await retriever.aclose()


def parse_response(payload: Any, n_queries: int, url: str = "the retriever") -> list[list[Hit]]:
    """Search-R1's ``{"result": ...}`` body (with or without scores) as hits per query."""

    def garbage(problem: str) -> RetrieverError:
        return RetrieverError(f"retriever at {url} sent a malformed answer: {problem}")

    result = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(result, list):
        raise garbage("expected a JSON object with a 'result' list")
    if len(result) != n_queries:
        raise garbage(f"{len(result)} result lists for {n_queries} queries")
    hits: list[list[Hit]] = []
    for row in result:
        if not isinstance(row, list):
            raise garbage("each query's result must be a list")
        hits.append([_parse_hit(item, garbage) for item in row])
    return hits


def _parse_hit(item: Any, garbage: Any) -> Hit:
    score: Any = 0.0
    document = item
    if isinstance(item, dict) and "document" in item:
        document, score = item["document"], item.get("score", 0.0)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise garbage(f"a score must be a number, got {score!r:.60}")
    if not isinstance(document, dict):
        raise garbage(f"a document must be an object, got {document!r:.60}")
    doc_id = document.get("id", "")
    contents = document.get("contents")
    if isinstance(contents, str):
        title, _, text = contents.partition("\n")
        return Document(str(doc_id), title, text), float(score)
    head, body = document.get("title", ""), document.get("text")
    if not isinstance(head, str) or not isinstance(body, str):
        raise garbage("a document needs 'contents' (or 'title' and 'text') strings")
    return Document(str(doc_id), head, body), float(score)


def _error_message(response: _Answer) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(payload, dict) and "error" in payload:
        return str(payload["error"])[:500]
    return str(payload)[:200]


__all__ = [
    "RemoteRetriever",
    "RetrieverError",
    "RetrieverUnavailable",
    "close_retrievers",
    "parse_response",
    "retriever_urls",
]
