"""``Python_Code_Generator_Tool``: a model writes Python for a request, the sandbox runs it.

The program runs exactly as the ``Python`` tool's would (``PythonTool``: the local sandbox or
E2B, the same ``SandboxLimits``); the model's call uses part of this call's time limit and the
program gets what is left, up to its own limit.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from agentflow_env.tools.agentflow.metadata import MetadataFacts
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
from agentflow_env.tools.texts import COUNT_FIELD, AgentFlowToolTexts

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
    """``query`` -> the model's program -> run in the sandbox -> code and output as text; in
    AgentFlow's shapes (``ToolContext.agentflow_shapes``) the dict AgentFlow's Python tool
    returns: ``printed_output``, ``variables`` (reported by a few lines run after the
    program, ``variables_trailer``) and ``execution_code``, or ``error`` alone; with AgentFlow's
    own words (``ToolContext.agentflow_texts``, under the presets) its middle cut, its note on
    the variables left out and its errors, as its tool writes them.

    ``backend`` and ``limits`` are ``PythonTool``'s (``"local"`` or ``"e2b"``; the sandbox's
    limits). ``timeout_s`` is the model's share of the call; the program's limit comes on top.
    """

    card = CARD
    aliases = short_names_of(PYTHON_CODER)
    agentflow_facts: ClassVar[MetadataFacts] = MetadataFacts(
        plural_keys=True,
        require_llm_engine=True,
        output_type=(
            "dict - the generated code (execution_code), what it printed (printed_output) and "
            "the values of its variables (variables); only an error when the code failed"
        ),
    )

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
            failed = ToolResult(
                ok=False,
                output=f"Model reply (no code block in it):\n{excerpt}",
                error=f"{self.name}: the model's reply contains no ```python code block",
                metadata={"kind": "no_code"},
            )
            return _failure(failed, context)
        code = extract_code(reply)
        limit = context.time_limit_s
        if limit is not None:
            limit -= time.monotonic() - started
            if limit < _MIN_RUN_S:
                failed = ToolResult.failure(
                    f"{self.name}: the model used up the call's time; the code was not run",
                    kind="timeout",
                    code=code,
                )
                return _failure(failed, context)
        shaped = context.agentflow_shapes
        texts = context.agentflow_texts
        marker = f"__agentflow_variables_{secrets.token_hex(8)}__"
        program = code + variables_trailer(marker, texts) if shaped else code
        ran = await self.python.run(
            {"code": program}, dataclasses.replace(context, time_limit_s=limit)
        )
        return _as_dict(code, ran, marker, texts) if shaped else _combined(code, ran)


def _failure(failed: ToolResult, context: ToolContext) -> ToolResult:
    """A failure before the program ran, in AgentFlow's shape where the context asks for it."""
    return _as_error_dict(failed, context.agentflow_texts) if context.agentflow_shapes else failed


def _combined(code: str, ran: ToolResult) -> ToolResult:
    """The program and what running it gave, as one observation."""
    label = "Printed output" if ran.ok else "Output and error"
    output = f"Generated code:\n```python\n{code.rstrip()}\n```\n{label}:\n{ran.output}".rstrip()
    error = None if ran.error is None else f"{PYTHON_CODER}: running the code failed: {ran.error}"
    return ToolResult(
        ok=ran.ok, output=output, error=error, metadata={**ran.metadata, "code": code}
    )


def _as_dict(code: str, ran: ToolResult, marker: str, texts: AgentFlowToolTexts) -> ToolResult:
    """The run as AgentFlow's Python tool returns it: ``printed_output``, ``variables`` and
    ``execution_code``, or ``error`` alone when the program failed."""
    if not ran.ok:
        return _as_error_dict(_combined(code, ran), texts)
    printed, variables = _split_variables(ran.output, marker)
    value = {
        "printed_output": _cut_as_told(printed.strip(), MAX_PRINTED_CHARS, texts),
        "variables": variables,
        "execution_code": code.strip("\n"),
    }
    return ToolResult(
        ok=True, output=str(value), metadata={**ran.metadata, "code": code}, value=value
    )


def _as_error_dict(failed: ToolResult, texts: AgentFlowToolTexts) -> ToolResult:
    """A failed call with AgentFlow's ``{"error": ...}`` as its value (and its text): with
    AgentFlow's own error texts (``texts``), its words, else this project's reason."""
    reason = _agentflow_reason(failed, texts)
    if reason is None:
        reason = (failed.error or "the call failed").removeprefix(f"{PYTHON_CODER}: ")
    value = {"error": reason}
    return dataclasses.replace(failed, output=str(value), value=value)


def _agentflow_reason(failed: ToolResult, texts: AgentFlowToolTexts) -> str | None:
    """What AgentFlow's Python tool says of this failure, where ``texts`` has its words: its
    sentence for a reply without code or a program out of time, else the message of the
    exception the program stopped with (as ``str`` of it gives: no type name)."""
    if not texts.given:
        return None
    kind = failed.metadata.get("kind")
    if kind == "no_code":
        return texts.python_no_code
    if kind == "timeout" or failed.metadata.get("timed_out"):
        return texts.python_timeout
    if failed.metadata.get("exit_code") in (None, 0):
        return None
    _, found, stderr = failed.output.rpartition(STDERR_HEADER)
    lines = [line for line in stderr.splitlines() if line.strip()] if found else []
    matched = _EXCEPTION_LINE.match(lines[-1].strip()) if lines else None
    return None if matched is None else matched.group("message") or ""


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s?(?P<message>.*))?$")
"""The last line of a traceback: the exception's type, then ``: `` and its message if any."""


def _cut_as_told(text: str, limit: int, texts: AgentFlowToolTexts) -> str:
    """``middle_cut``, or with AgentFlow's marker (``texts``) AgentFlow's cut: ``limit // 2 -
    AGENTFLOW_CUT_ROOM`` characters kept at each end, whatever the marker's length."""
    marker = texts.python_middle_cut
    if marker is None:
        return middle_cut(text, limit)
    if len(text) <= limit:
        return text
    kept = limit // 2 - AGENTFLOW_CUT_ROOM
    return text[:kept] + marker + text[-kept:]


def _split_variables(stdout: str, marker: str) -> tuple[str, dict[str, str]]:
    """What the program printed, and the variables the trailer reported after ``marker`` (none
    when the program ended before the trailer ran)."""
    printed, found, report = stdout.rpartition("\n" + marker)
    if not found:
        return stdout, {}
    try:
        variables = json.loads(report.strip())
    except ValueError:
        return printed, {}
    if not isinstance(variables, dict):
        return printed, {}
    return printed, {str(name): str(shown) for name, shown in variables.items()}


def middle_cut(text: str, limit: int) -> str:
    """``text`` cut in the middle to about ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - len(_CUT), 1)
    return text[:half] + _CUT + text[-half:]


def variables_trailer(marker: str, texts: AgentFlowToolTexts | None = None) -> str:
    """Code run after the program: prints ``marker`` then, as JSON, the program's variables as
    AgentFlow's Python tool reports them (its names without leading ``__``, modules left out,
    functions and classes by name, each value's text cut to ``MAX_VARIABLE_CHARS``, at most
    ``MAX_VARIABLES``). Its own names start with ``__``, so it never reports itself.

    With AgentFlow's words (``texts``) a long value is cut with its marker as it cuts, and the
    note on the variables left out is its sentence, counting modules as it does."""
    texts = texts or AgentFlowToolTexts()
    cut = texts.python_middle_cut
    omitted = texts.python_omitted
    return _TRAILER.format(
        marker=marker,
        limit=MAX_VARIABLE_CHARS,
        count=MAX_VARIABLES,
        cut=_CUT if cut is None else cut,
        room=len(_CUT) if cut is None else AGENTFLOW_CUT_ROOM,
        omitted=OMITTED_NOTE if omitted is None else omitted,
        count_field=COUNT_FIELD,
        left_names="names" if omitted is None else "every",
        shell=tuple(sorted(_SHELL_NAMES)),
    )


MAX_PRINTED_CHARS = 3500
MAX_VARIABLE_CHARS = 2000
MAX_VARIABLES = 20
"""AgentFlow's Python tool's limits on what it reports of a run."""
_CUT = " ... [middle cut] ... "
AGENTFLOW_CUT_ROOM = 50
"""What AgentFlow's middle cut takes off each half of the limit, whatever its marker's length."""
OMITTED_NOTE = "{count} more variables left out"
STDERR_HEADER = "\n[stderr]\n"
"""Where a failed run's text (``result_to_tool_result``) gives the program's error output."""
_SHELL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "_"})
"""Names an interactive kernel (E2B's) defines that are not the program's (with ``_i``, ``_i3``,
``_3``, ``_oh`` and the like)."""
_TRAILER = """

def __agentflow_report():
    import builtins as __b, json as __json, re as __re, sys as __sys, types as __types
    def __shown(value):
        if __b.isinstance(value, (__types.FunctionType, __types.BuiltinFunctionType, __b.type)):
            return "<" + __b.type(value).__name__ + ": " + __b.getattr(value, "__name__", "?") + ">"
        if __b.hasattr(value, "__iter__") and __b.hasattr(value, "__next__"):
            return "<iterator: " + __b.type(value).__name__ + ">"
        try:
            text = __b.str(value)
        except __b.Exception:
            return "<" + __b.type(value).__name__ + ", not printable>"
        if __b.len(text) > {limit}:
            half = {limit} // 2 - {room}
            text = text[:half] + {cut!r} + text[-half:]
        return text
    try:
        found = __b.globals()
        shell = {shell!r}
        every = [
            name for name, value in __b.list(found.items())
            if not name.startswith("__") and name not in shell
            and not __re.fullmatch(r"_(i{{1,3}}|i\\d+|\\d+|[dio]h)", name)
        ]
        names = [name for name in every if not __b.isinstance(found[name], __types.ModuleType)]
        report = {{name: __shown(found[name]) for name in names[:{count}]}}
        if __b.len(names) > {count}:
            left = __b.str(__b.len({left_names}) - {count})
            report["__truncated__"] = {omitted!r}.replace({count_field!r}, left)
        text = __json.dumps(report)
    except __b.Exception:  # never let the report fail a program that ran
        text = "{{}}"
    __sys.stdout.write("\\n{marker}" + text + "\\n")
    __sys.stdout.flush()
__agentflow_report()
"""


__all__ = ["PythonCodeGeneratorTool", "middle_cut", "variables_trailer"]
