"""``Python_Code_Generator_Tool``: a model writes Python for a request, the sandbox runs it.

The program runs exactly as the ``Python`` tool's would (``PythonTool``: the local sandbox or
E2B, the same ``SandboxLimits``); the model's call uses part of this call's time limit and the
program gets what is left, up to its own limit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from agentflow_env.tools.agentflow.model import (
    DEFAULT_LLM_TIMEOUT_S,
    ChatModel,
    LLMTool,
    ModelCallError,
)
from agentflow_env.tools.agentflow.names import PYTHON_CODER, short_names_of
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.python_tool import PythonTool, extract_code
from agentflow_env.tools.sandbox import SandboxLimits

SYSTEM_PROMPT = (
    "You write short, self-contained Python 3 programs that compute what a request asks. "
    "Use only the standard library; read no files and use no network. Print the final result "
    "with a few words saying what it is."
)
REPLY_FORMAT = "Think it through, then give the whole program in one block:\n```python\n...\n```"
_MIN_RUN_S = 0.05
_REPLY_EXCERPT_CHARS = 1500

CARD = ToolCard(
    name=PYTHON_CODER,
    description=(
        "Has a language model write a short Python 3 program for a calculation described in "
        "words, runs that program in an isolated sandbox, and returns the program together "
        "with what it printed (or the error it stopped with)."
    ),
    input_schema={
        "query": {
            "type": "string",
            "description": (
                "the calculation or small math problem, in words, with every number and list "
                "of data it needs"
            ),
            "required": True,
        },
    },
    output_type="str - the generated code, then its printed output or its error",
    primary_argument="query",
    demo_commands=(
        {
            "command": f'{PYTHON_CODER}(query="Sum of all prime numbers below 50")',
            "description": "a small computation described in words",
        },
        {
            "command": f'{PYTHON_CODER}(query="The mean and the median of [3, 8, 1, 9, 4]")',
            "description": "statistics of numbers given in the query",
        },
    ),
    limitations=(
        "for arithmetic, counting and small algorithms: standard library only, no network, "
        "no access to the task's documents",
        "each call is a new program with limited time, memory and output; nothing carries over "
        "between calls",
        "the model may misread the request and compute something else",
    ),
    best_practices=(
        "state the exact computation and give every input value in the query",
        "ask for one result per call",
        "read the returned code to check that it computes what was asked",
    ),
)


class PythonCodeGeneratorTool(LLMTool):
    """``query`` -> the model's program -> run in the sandbox -> code and output as text.

    ``backend`` and ``limits`` are ``PythonTool``'s (``"local"`` or ``"e2b"``; the sandbox's
    limits). ``timeout_s`` is the model's share of the call; the program's limit comes on top.
    """

    card = CARD
    aliases = short_names_of(PYTHON_CODER)

    def __init__(
        self,
        llm: ChatModel | None = None,
        timeout_s: float = DEFAULT_LLM_TIMEOUT_S,
        backend: str = "local",
        limits: SandboxLimits | None = None,
    ) -> None:
        super().__init__(llm, timeout_s)
        self.python = PythonTool(backend=backend, limits=limits)
        self.timeout_s = timeout_s + self.python.timeout_s
        # The sandbox stops the program itself and keeps its partial output.
        self.stop_grace_s = self.python.stop_grace_s

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        started = time.monotonic()
        query = str(arguments["query"])
        try:
            reply = await self.ask(SYSTEM_PROMPT, f"Request:\n{query}\n\n{REPLY_FORMAT}")
        except ModelCallError as error:
            return error.result()
        if "```" not in reply:
            excerpt = reply[:_REPLY_EXCERPT_CHARS]
            return ToolResult(
                ok=False,
                output=f"Model reply (no code block in it):\n{excerpt}",
                error=f"{self.name}: the model's reply contains no ```python code block",
                metadata={"kind": "no_code"},
            )
        code = extract_code(reply)
        limit = context.time_limit_s
        if limit is not None:
            limit -= time.monotonic() - started
            if limit < _MIN_RUN_S:
                return ToolResult.failure(
                    f"{self.name}: the model used up the call's time; the code was not run",
                    kind="timeout",
                    code=code,
                )
        ran = await self.python.run(
            {"code": code}, dataclasses.replace(context, time_limit_s=limit)
        )
        return _combined(code, ran)


def _combined(code: str, ran: ToolResult) -> ToolResult:
    """The program and what running it gave, as one observation."""
    label = "Printed output" if ran.ok else "Output and error"
    output = f"Generated code:\n```python\n{code.rstrip()}\n```\n{label}:\n{ran.output}".rstrip()
    error = None if ran.error is None else f"{PYTHON_CODER}: running the code failed: {ran.error}"
    return ToolResult(
        ok=ran.ok, output=output, error=error, metadata={**ran.metadata, "code": code}
    )


__all__ = ["PythonCodeGeneratorTool"]
