"""Running one tool call safely: validation, a wall-clock timeout, an output cap, no exceptions."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from agentflow_env.tools.base import Tool, ToolArgumentError, ToolContext, ToolResult
from agentflow_env.tools.texts import agentflow_cut


async def run_tool(
    tool: Tool,
    arguments: Mapping[str, Any],
    context: ToolContext,
    *,
    timeout_s: float | None = None,
    max_output_chars: int = 8000,
) -> ToolResult:
    """Validate and run ``tool``; every failure comes back as ``ToolResult(ok=False)``.

    The timeout is enforced with ``asyncio.wait_for`` (works in any thread, unlike signals); a
    tool that blocks the event loop cannot be interrupted this way, so blocking tools must run
    their work in a thread or a subprocess. A tool with ``stop_grace_s`` gets the limit in
    ``context.time_limit_s`` and stops itself, keeping what it has (a program's partial
    output); it is cancelled only if it has not returned ``stop_grace_s`` seconds later.
    """
    started = time.perf_counter()
    try:
        clean = tool.validate(arguments)
    except ToolArgumentError as exc:
        return ToolResult.failure(f"invalid arguments: {exc}", kind="arguments")
    limit = tool.timeout_s if timeout_s is None else timeout_s
    wait = limit
    if tool.stop_grace_s is not None:
        if context.time_limit_s is not None:
            limit = min(limit, context.time_limit_s)
        context = dataclasses.replace(context, time_limit_s=limit)
        wait = limit + tool.stop_grace_s
    try:
        result = await asyncio.wait_for(tool.run(clean, context), timeout=wait)
    except asyncio.TimeoutError:
        return ToolResult.failure(f"{tool.name} timed out after {limit:g} s", kind="timeout")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a crashing tool is an observation, not a crash of the env
        return ToolResult.failure(f"{tool.name} raised {type(exc).__name__}: {exc}", kind="crash")
    if not isinstance(result, ToolResult):
        return ToolResult.failure(f"{tool.name} returned {type(result).__name__}, not ToolResult")
    result.metadata.setdefault("latency_s", round(time.perf_counter() - started, 6))
    if context.agentflow_cut:
        return _agentflow_capped(result, max_output_chars)
    return _capped(result, max_output_chars)


def _capped(result: ToolResult, max_chars: int) -> ToolResult:
    if len(result.output) <= max_chars:
        return result
    dropped = len(result.output) - max_chars
    result.output = result.output[:max_chars] + f"\n...[output cut: {dropped} more characters]"
    result.metadata["truncated_chars"] = dropped
    return result


def _agentflow_capped(result: ToolResult, max_chars: int) -> ToolResult:
    """``result`` cut by AgentFlow's rule (``agentflow_cut``): each long string of its value,
    or its text when it has no value, rather than the text as a whole."""
    if result.value is not None:
        value = agentflow_cut(result.value, max_chars)
        if value != result.value:
            result.value = value
            result.output = str(value)
            result.metadata["agentflow_cut"] = True
        return result
    cut = agentflow_cut(result.output, max_chars)
    if cut != result.output:
        result.metadata["agentflow_cut"] = True
        result.output = cut
    return result
