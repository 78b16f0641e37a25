"""The ``Python`` tool: runs planner-written code in a sandbox and reports what it printed.

``extract_code`` takes the code out of the planner's text (```python fences or the bare text);
``result_to_tool_result`` turns a ``SandboxResult`` of either backend (the local sandbox,
``agentflow_env.tools.sandbox``, or E2B, ``agentflow_env.tools.e2b_sandbox``) into the
observation.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Mapping
from typing import Any

from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.tools.e2b_sandbox import E2BSandbox
from agentflow_env.tools.sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    describe_failure,
    run_python,
)

_STDERR_TAIL_CHARS = 2000

_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)(?:```|\Z)", re.S | re.I)


def extract_code(text: str) -> str:
    """The code in ``text``: the ```python fenced blocks joined, or the text itself."""
    blocks = [block.strip("\n") for block in _FENCED.findall(text)]
    if blocks:
        return "\n".join(textwrap.dedent(block) for block in blocks).strip("\n") + "\n"
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        stripped = stripped[3:-3]
    return textwrap.dedent(stripped.strip("\n")).strip("\n") + "\n"


def result_to_tool_result(result: SandboxResult, limits: SandboxLimits, **meta: Any) -> ToolResult:
    """The observation for the planner: stdout, plus a stderr tail and a reason on failure."""
    metadata = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "killed_reason": result.killed_reason,
        "output_truncated": result.output_truncated,
        "duration_s": result.duration_s,
        "not_isolated": list(result.not_isolated),
        **meta,
    }
    error = describe_failure(result, limits, local=meta.get("backend", "local") == "local")
    if error is None:
        output = result.stdout if result.stdout.strip() else "(no output: print() what you need)"
        return ToolResult(ok=True, output=output, metadata=metadata)
    output = result.stdout
    stderr = result.stderr.strip()
    if stderr:
        tail = stderr[-_STDERR_TAIL_CHARS:]
        output = f"{output.rstrip()}\n[stderr]\n{tail}".lstrip("\n")
    return ToolResult(ok=False, output=output, error=error, metadata=metadata)


class PythonTool(Tool):
    """Runs planner-written Python in a sandbox: ``backend="local"`` (a limited subprocess) or
    ``"e2b"`` (an E2B cloud sandbox; needs the ``e2b`` extra and ``E2B_API_KEY``)."""

    card = ToolCard(
        name="Python",
        description=(
            "Runs a short Python 3 program (standard library only) and returns what it prints. "
            "A trailing expression is printed like in a REPL. Use it for exact arithmetic, "
            "dates, counting and small algorithms."
        ),
        input_schema={
            "code": {
                "type": "string",
                "description": "the Python code to run; print() the values you need",
                "required": True,
            },
        },
        output_type="the program's standard output, or the error and the end of its traceback",
        primary_argument="code",
        demo_commands=(
            {"command": 'Python(code="print(sum(range(1, 101)))")', "description": "a sum"},
            {
                "command": 'Python(code="import datetime\\nprint(datetime.date(2024, 3, 1).weekday())")',
                "description": "a weekday",
            },
        ),
        limitations=(
            "no network access and no third-party packages",
            "each call is a fresh process: variables do not persist between calls",
            "limited time, memory and output",
        ),
    )

    def __init__(
        self,
        backend: str = "local",
        limits: SandboxLimits | None = None,
        *,
        e2b: E2BSandbox | None = None,
    ) -> None:
        if backend not in ("local", "e2b"):
            raise ValueError(f"unknown Python backend {backend!r}; use 'local' or 'e2b'")
        self.backend = backend
        self.limits = limits or SandboxLimits()
        self._e2b = e2b
        if backend == "e2b" and e2b is None:
            self._e2b = E2BSandbox(limits=self.limits)
        # The sandbox enforces the time limit itself, so that a program stopped at it still
        # reports what it printed; the runner waits this much longer (killing, cleaning up; E2B
        # also creates the sandbox) before it cancels the call.
        self.timeout_s = self.limits.timeout_s
        self.stop_grace_s = 3.0 if backend == "local" else 30.0

    def limits_for(self, context: ToolContext) -> SandboxLimits:
        """This call's limits: the tool's, with the runner's time limit if that is shorter."""
        limit = context.time_limit_s
        if limit is None or limit >= self.limits.timeout_s:
            return self.limits
        return dataclasses.replace(self.limits, timeout_s=limit)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        code = extract_code(str(arguments["code"]))
        if not code.strip():
            return ToolResult.failure("Python: no code to run")
        limits = self.limits_for(context)
        try:
            if self._e2b is not None:
                result = await self._e2b.run(code, timeout_s=limits.timeout_s)
            else:
                result = await run_python(code, limits)
        except SandboxError as error:
            return ToolResult.failure(f"Python sandbox unavailable: {error}", kind="sandbox")
        return result_to_tool_result(result, limits, backend=self.backend)


__all__ = ["PythonTool", "extract_code", "result_to_tool_result"]
