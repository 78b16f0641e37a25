"""Calling a frozen module from an episode: timed and logged (``timed``), its reply checked
(``expect``), its failure recorded (``module_failed``: the episode then ends on this turn)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from agentflow_env.workflow.episode_state import EpisodeState

T = TypeVar("T")


async def timed(state: EpisodeState, module: str, turn: int, call: Awaitable[T]) -> T:
    """Await a frozen module's call; log its latency and LLM tokens (``module_call``)."""
    started = time.perf_counter()
    first_event = state.memory.event_count
    result: Any = None
    try:
        result = await call
        return result
    finally:
        latency = time.perf_counter() - started
        state.turn_latency[module] = state.turn_latency.get(module, 0.0) + latency
        usage = _call_usage(result, state.memory.events_since(first_event))
        state.memory.log("module_call", turn, module=module, latency_s=latency, **usage)


def module_failed(state: EpisodeState, turn: int, module: str, exc: Exception) -> None:
    """A frozen module failed after its own retries: record it; the episode ends this turn."""
    message = f"{module} failed: {type(exc).__name__}: {exc}"
    state.memory.log("module_error", turn, module=module, error=message)
    state.module_errors.append(message)


def expect(value: Any, kind: type[T]) -> T:
    """A module's reply, checked: a wrong type is that module's failure, not the env's crash."""
    if not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _call_usage(result: Any, events: Sequence[Any]) -> dict[str, int]:
    """LLM tokens of one module call: from the record it returned (``meta["usage"]``), else from
    the ``module_output`` events it logged. Rule modules report none."""
    meta = getattr(result, "meta", None)
    sources = (
        [meta]
        if isinstance(meta, Mapping) and "usage" in meta
        else [e.payload for e in events if e.kind == "module_output"]
    )
    totals = {"prompt_tokens": 0, "completion_tokens": 0}
    for source in sources:
        usage = source.get("usage")
        if isinstance(usage, Mapping):
            for key in totals:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    totals[key] += value
    return totals
