"""The E2B backend through the real ``e2b-code-interpreter`` SDK, in its debug mode, against a
loopback stand-in server (``tests/e2b_standin.py``) on 127.0.0.1:49999."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from e2b_standin import E2B_DEBUG_PORT, Script, StandIn  # noqa: E402

from agentflow_env.tools.base import ToolContext, ToolResult  # noqa: E402
from agentflow_env.tools.e2b_sandbox import E2BSandbox  # noqa: E402
from agentflow_env.tools.python_tool import PythonTool  # noqa: E402
from agentflow_env.tools.runner import run_tool  # noqa: E402
from agentflow_env.tools.sandbox import SandboxLimits  # noqa: E402

pytest.importorskip("e2b_code_interpreter", reason="the e2b extra is not installed")

LIMITS = SandboxLimits(timeout_s=3.0, max_output_bytes=4096)
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def _ipv6_port_taken(port: int) -> bool:
    """The SDK dials "localhost", which may resolve to ::1 first: nobody else may answer there."""
    try:
        with socket.create_connection(("::1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    if _ipv6_port_taken(E2B_DEBUG_PORT):
        pytest.skip(f"another server listens on [::1]:{E2B_DEBUG_PORT}, the E2B debug port")
    server = StandIn()
    try:
        server.start()
    except OSError as error:
        pytest.skip(f"127.0.0.1:{E2B_DEBUG_PORT}, the E2B debug port, is busy: {error}")
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,::1")
    try:
        yield server
    finally:
        server.stop()


def call(tool: PythonTool, code: str) -> ToolResult:
    return asyncio.run(run_tool(tool, {"code": code}, ToolContext()))


def e2b_tool(limits: SandboxLimits = LIMITS) -> PythonTool:
    return PythonTool(backend="e2b", limits=limits, e2b=E2BSandbox(limits))


def assert_still_usable(tool: PythonTool) -> None:
    result = call(tool, "print(1+1)")
    assert result.ok, result
    assert result.output.strip() == "2"


def test_normal_code_through_the_sdk(standin: StandIn) -> None:
    tool = PythonTool(backend="e2b", limits=LIMITS)
    result = call(tool, "```python\nprint(1+1)\n```")
    assert result.ok, result
    assert result.output.strip() == "2"
    assert result.metadata["backend"] == "e2b"
    request = standin.requests[-1]
    assert (request["method"], request["path"]) == ("POST", "/execute")
    assert request["body"]["code"] == "print(1+1)\n"
    headers = {key.lower(): value for key, value in request["headers"].items()}
    assert headers["e2b-sandbox-id"] == "debug_sandbox_id"
    assert headers["e2b-sandbox-port"] == str(E2B_DEBUG_PORT)


def test_error_event_becomes_a_readable_error(standin: StandIn) -> None:
    tool = e2b_tool()
    result = call(tool, "print('before')\n1/0")
    assert not result.ok
    assert result.error == "exited with code 1: ZeroDivisionError: division by zero"
    assert result.output.startswith("before")
    assert "\x1b[" not in result.output  # IPython's colours are stripped
    assert_still_usable(tool)


def test_memory_error_through_e2b(standin: StandIn) -> None:
    tool = e2b_tool()
    result = call(tool, "data = bytearray(8 * 1024**3)")
    assert not result.ok
    assert result.error == "memory limit exceeded: MemoryError"
    assert_still_usable(tool)


def test_result_and_stream_events_are_mapped(standin: StandIn) -> None:
    standin.scripted.append(
        Script(
            [
                {"type": "number_of_executions", "execution_count": 7},
                {"type": "stdout", "text": "hello\n", "timestamp": 1},
                {"type": "stderr", "text": "a warning\n", "timestamp": 2},
                {"type": "result", "text": "42", "is_main_result": True, "html": "<b>42</b>"},
                {"type": "end_of_execution"},
            ]
        )
    )
    result = asyncio.run(E2BSandbox(LIMITS).run("6 * 7"))
    assert result.ok
    assert result.stdout == "hello\n42\n"
    assert result.stderr == "a warning\n"
    assert result.exit_code == 0


def test_timeout(standin: StandIn) -> None:
    limits = SandboxLimits(timeout_s=0.5)
    standin.scripted.append(Script([{"type": "stdout", "text": "late\n", "timestamp": 0}], 2.0))
    tool = e2b_tool(limits)
    result = call(tool, "while True:\n    pass")
    assert "late" not in result.output  # cut at 0.5 s, not waited out to the script's 2 s
    assert not result.ok
    assert result.error == "timed out after 0.5 s"
    assert result.metadata["timed_out"] is True
    assert_still_usable(tool)


def test_output_is_cut_at_the_cap(standin: StandIn) -> None:
    chunk = "x" * 1000 + "\n"
    standin.scripted.append(
        Script([{"type": "stdout", "text": chunk, "timestamp": 0} for _ in range(50)])
    )
    tool = e2b_tool()
    result = call(tool, "print('x' * 10**9)")
    assert not result.ok
    assert result.error == f"output exceeded {LIMITS.max_output_bytes} bytes"
    assert len(result.output) <= LIMITS.max_output_bytes
    assert_still_usable(tool)


def test_server_error_is_an_observation(standin: StandIn) -> None:
    standin.scripted.append(Script([], status=500))
    tool = e2b_tool()
    result = call(tool, "print(1)")
    assert not result.ok and result.error
    assert_still_usable(tool)


def test_reuse_keeps_one_sandbox_until_close(standin: StandIn) -> None:
    sandbox = E2BSandbox(LIMITS, reuse=True)

    async def episode() -> tuple[object, object, object]:
        await sandbox.run("x = 1")
        first = sandbox._sandbox
        await sandbox.run("print(x)")
        second = sandbox._sandbox
        await sandbox.close()
        return first, second, sandbox._sandbox

    first, second, after = asyncio.run(episode())
    assert first is not None and first is second
    assert after is None


def test_reused_sandbox_is_dropped_after_a_timeout(standin: StandIn) -> None:
    # A limit far above a loaded machine's round trip, so only the scripted hang times out.
    sandbox = E2BSandbox(SandboxLimits(timeout_s=2.0), reuse=True)

    async def calls() -> object:
        await sandbox.run("print(1)")
        assert sandbox._sandbox is not None
        standin.scripted.append(Script([], delay_s=5.0))
        result = await sandbox.run("while True: pass")
        assert result.timed_out
        return sandbox._sandbox

    assert asyncio.run(calls()) is None


def test_missing_api_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    result = call(PythonTool(backend="e2b", limits=LIMITS), "print(1)")
    assert not result.ok
    assert result.error is not None and "E2B_API_KEY" in result.error


def test_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", None)  # makes the import fail
    monkeypatch.setenv("E2B_API_KEY", "e2b_fake")
    result = call(PythonTool(backend="e2b", limits=LIMITS), "print(1)")
    assert not result.ok
    assert result.error is not None and "pip install 'agentflow-env[e2b]'" in result.error


def test_core_import_does_not_load_e2b() -> None:
    code = (
        "import sys, agentflow_env.tools.python_tool\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('e2b', 'e2b_code_interpreter')))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout.strip() == "[]"
