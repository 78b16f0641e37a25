"""A client for Serper-compatible web search APIs.

The protocol: ``POST {base}/search`` with the JSON body ``{"q": query, "num": n}`` and the key in
the ``X-API-KEY`` header; the reply is a JSON object whose ``"organic"`` list holds the results
(``{"title", "link", "snippet"}``), optionally with an ``"answerBox"``. google.serper.dev speaks
it, and so can any stand-in. HTTP goes through httpx (``agentflow_env.base.http``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from agentflow_env.base.http import Unreachable, post_json
from agentflow_env.base.settings import read_env_var

SEARCH_API_URL_ENV_VAR = "AGENTFLOW_SEARCH_API_URL"
SEARCH_API_KEY_ENV_VAR = "AGENTFLOW_SEARCH_API_KEY"
DEFAULT_SEARCH_API_URL = "https://google.serper.dev"
API_KEY_HEADER = "X-API-KEY"


class WebSearchError(RuntimeError):
    """The search API could not be reached, refused the request or answered garbage."""


@dataclass(frozen=True)
class WebResult:
    """One web result."""

    title: str
    link: str
    snippet: str


@dataclass(frozen=True)
class WebResults:
    """A search's results, best first, and the API's direct answer where it gave one."""

    results: tuple[WebResult, ...]
    answer: str | None = None


def search_api_settings(url: str | None, key: str | None) -> tuple[str, str | None]:
    """The API's base URL and key: the arguments, else the environment variables, else
    google.serper.dev and no key."""
    if url is None:
        url = read_env_var(SEARCH_API_URL_ENV_VAR) or ""
    if key is None:
        key = read_env_var(SEARCH_API_KEY_ENV_VAR) or ""
    url = url.strip() or DEFAULT_SEARCH_API_URL
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the search API URL must start with http:// or https://, got {url!r}")
    return url, (key.strip() or None)


class SerperClient:
    """Asks one Serper-compatible API; retries connection errors, timeouts, 429 and 5xx."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout_s: float = 10.0,
        max_retries: int = 1,
        backoff_s: float = 0.5,
    ) -> None:
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        base = base_url.rstrip("/")
        self.endpoint = base if base.endswith("/search") else base + "/search"
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s

    def worst_case_s(self) -> float:
        """How long ``search`` may take before it gives up (every try and wait)."""
        waits = sum(self.backoff_s * 2**attempt for attempt in range(self.max_retries))
        return (self.max_retries + 1) * self.timeout_s + waits

    async def search(self, query: str, num: int) -> WebResults:
        """The results for ``query``; ``WebSearchError`` when there are none to be had."""
        headers = {API_KEY_HEADER: self._api_key, "Content-Type": "application/json"}
        body = {"q": query, "num": num}
        async with httpx.AsyncClient() as client:
            try:
                response = await post_json(
                    client,
                    self.endpoint,
                    body,
                    headers=headers,
                    timeout_s=self.timeout_s,
                    tries=self.max_retries + 1,
                    backoff=lambda attempt: self.backoff_s * 2 ** (attempt - 1),
                )
            except Unreachable as error:
                raise WebSearchError(
                    f"the search API at {self.endpoint} is unreachable after "
                    f"{self.max_retries + 1} tries (last: {error.problem})"
                ) from None
        if response.status_code != 200:
            raise WebSearchError(
                f"the search API at {self.endpoint} refused the request: "
                f"HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            payload = response.json()
        except ValueError:
            raise WebSearchError(
                f"the search API at {self.endpoint} answered with non-JSON: {response.text[:200]!r}"
            ) from None
        found = parse_results(payload, self.endpoint)
        return WebResults(found.results[: max(num, 0)], found.answer)


def parse_results(payload: Any, where: str = "the search API") -> WebResults:
    """A Serper reply as ``WebResults``; ``WebSearchError`` if it is not one."""
    if not isinstance(payload, Mapping):
        raise WebSearchError(f"{where} sent a malformed answer: expected a JSON object")
    organic = payload.get("organic")
    if organic is None:
        message = payload.get("message") or payload.get("error")
        detail = f": {str(message)[:200]}" if message else ""
        raise WebSearchError(f"{where} sent no 'organic' results{detail}")
    if not isinstance(organic, list):
        raise WebSearchError(f"{where} sent a malformed answer: 'organic' is not a list")
    results = []
    for item in organic:
        if not isinstance(item, Mapping):
            raise WebSearchError(f"{where} sent a malformed result: {item!r:.80}")
        title, link, snippet = (_text(item.get(key)) for key in ("title", "link", "snippet"))
        if title or link or snippet:
            results.append(WebResult(title, link, snippet))
    return WebResults(tuple(results), _answer(payload.get("answerBox")))


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def _answer(box: Any) -> str | None:
    if not isinstance(box, Mapping):
        return None
    for key in ("answer", "snippet"):
        text = _text(box.get(key))
        if text:
            return text
    return None


__all__ = [
    "API_KEY_HEADER",
    "DEFAULT_SEARCH_API_URL",
    "SEARCH_API_KEY_ENV_VAR",
    "SEARCH_API_URL_ENV_VAR",
    "SerperClient",
    "WebResult",
    "WebResults",
    "WebSearchError",
    "parse_results",
    "search_api_settings",
]
