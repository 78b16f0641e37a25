"""Posting JSON with retries, over httpx: what the web-search tool and the web page reader use.

Connection errors, timeouts and the statuses in ``RETRYABLE_STATUS`` are retried after a
backoff; any other answer is returned for the caller to judge (its errors name its service).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import httpx

__all__ = ["RETRYABLE_STATUS", "Unreachable", "post_json"]

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class Unreachable(Exception):
    """Every try failed; ``problem`` says how the last one did."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: Any,
    *,
    timeout_s: float,
    tries: int,
    backoff: Callable[[int], float],
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """The first answer to ``POST url`` (``body`` as JSON) whose status is not retryable.

    ``backoff(attempt)`` is the wait before try ``attempt`` (from 1). Raises ``Unreachable`` when
    all ``tries`` failed.
    """
    problem = "no answer"
    for attempt in range(tries):
        if attempt:
            await asyncio.sleep(backoff(attempt))
        try:
            response = await client.post(
                url, json=body, headers=dict(headers or {}), timeout=timeout_s
            )
        except httpx.TimeoutException:
            problem = f"timed out after {timeout_s:g} s"
            continue
        except httpx.TransportError as error:
            problem = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            continue
        if response.status_code in RETRYABLE_STATUS:
            problem = f"HTTP {response.status_code}: {response.text[:200]}"
            continue
        return response
    raise Unreachable(problem)
