"""An async client for Search-R1 style retriever servers (``POST /retrieve``), with retries.

Works with ``agentflow-env serve-retriever`` and with Search-R1's / FlashRAG's own servers.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import httpx

from agentflow_env.base.http import Unreachable, post_json
from agentflow_env.retrieval.bm25 import Hit
from agentflow_env.retrieval.corpus import Document


class RetrieverError(RuntimeError):
    """The retriever refused the request or answered something that is not Search-R1's format."""


class RetrieverUnavailable(RetrieverError):
    """The retriever could not be reached (connection errors, timeouts, 5xx) after every try."""


class RemoteRetriever:
    """Searches a remote corpus; one instance can serve many event loops and threads.

    Args:
        url: the server's base URL (``http://host:port``) or its ``/retrieve`` endpoint.
        timeout_s: limit for one HTTP request.
        max_retries: further tries after the first on connection errors, timeouts, 429 and 5xx,
            waiting ``backoff_s``, then twice as long each time (at most ``max_backoff_s``).
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        max_retries: int = 2,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever URL must start with http:// or https://, got {url!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        base = url.rstrip("/")
        self.url = base.removesuffix("/retrieve")
        self.endpoint = self.url + "/retrieve"
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._clients = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @property
    def tries(self) -> int:
        return self.max_retries + 1

    def worst_case_s(self) -> float:
        """How long ``search_batch`` may take before giving up (all tries and waits)."""
        waits = sum(self._backoff(attempt) for attempt in range(1, self.tries))
        return self.tries * self.timeout_s + waits

    async def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents for ``query`` with their scores, best first."""
        return (await self.search_batch([query], k))[0]

    async def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """One request for many queries. Raises ``RetrieverError`` / ``RetrieverUnavailable``."""
        if not queries:
            return []
        body = {"queries": list(queries), "topk": int(k), "return_scores": True}
        payload = await self._post(body)
        return parse_response(payload, len(queries), self.url)

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.pop(loop, None)
        if client is not None:
            await client.aclose()

    async def _post(self, body: dict[str, Any]) -> Any:
        try:
            response = await post_json(
                self._client(),
                self.endpoint,
                body,
                timeout_s=self.timeout_s,
                tries=self.tries,
                backoff=self._backoff,
            )
        except Unreachable as error:
            raise RetrieverUnavailable(
                f"retriever at {self.url} unreachable after {self.tries} tries "
                f"(last: {error.problem})"
            ) from None
        if response.status_code != 200:
            raise RetrieverError(
                f"retriever at {self.url} rejected the request: HTTP {response.status_code}: "
                f"{_error_message(response)}"
            )
        try:
            return response.json()
        except ValueError:
            raise RetrieverError(
                f"retriever at {self.url} answered with non-JSON: {response.text[:200]!r}"
            ) from None

    def _backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    def _client(self) -> httpx.AsyncClient:
        """One connection pool per event loop (an httpx client must stay on its loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None or client.is_closed:
                limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
                client = httpx.AsyncClient(limits=limits)
                self._clients[loop] = client
            return client


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


def _error_message(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(payload, dict) and "error" in payload:
        return str(payload["error"])[:500]
    return str(payload)[:200]


__all__ = ["RemoteRetriever", "RetrieverError", "RetrieverUnavailable", "parse_response"]
