"""The E2B backend of the Python tool: code runs in an E2B cloud sandbox (a Firecracker microVM).

``e2b-code-interpreter`` is an optional extra (``pip install 'agentflow-env[e2b]'``) and is
imported only when a call is made. The SDK's ``AsyncSandbox`` is used: ``create()`` starts a
sandbox (no network call when ``E2B_DEBUG=true``: the SDK then talks to a server on
``localhost:49999``), ``run_code(code, timeout=...)`` streams newline-delimited JSON events
(``stdout``, ``stderr``, ``result``, ``error``...) into callbacks, ``kill()`` ends it.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Any

from agentflow_env.tools.sandbox import (
    KILLED_OUTPUT,
    KILLED_TIMEOUT,
    SandboxError,
    SandboxLimits,
    SandboxResult,
)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class E2BUnavailableError(SandboxError):
    """The E2B SDK is not installed or no API key is configured."""


class _OutputOverflow(Exception):
    """Raised from an output callback to stop reading once the cap is exceeded."""


def e2b_debug_mode() -> bool:
    """The SDK's own rule: ``E2B_DEBUG=true`` sends everything to ``localhost`` instead."""
    return os.getenv("E2B_DEBUG", "false").lower() == "true"


def _load_sdk() -> tuple[Any, type[BaseException]]:
    try:
        from e2b import TimeoutException
        from e2b_code_interpreter import AsyncSandbox
    except ImportError as error:
        raise E2BUnavailableError(
            f"the E2B backend needs the e2b extra: pip install 'agentflow-env[e2b]' ({error})"
        ) from error
    return AsyncSandbox, TimeoutException


class _Capture:
    """Collects the streamed events, keeping at most ``cap`` characters of text."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.truncated = False
        self.error: Any = None

    def _keep(self, sink: list[str], text: str) -> None:
        room = self.cap - self.used
        if len(text) > room:
            sink.append(text[: max(room, 0)])
            self.used = self.cap
            self.truncated = True
            raise _OutputOverflow
        sink.append(text)
        self.used += len(text)

    def on_stdout(self, message: Any) -> None:
        self._keep(self.stdout, str(message.line))

    def on_stderr(self, message: Any) -> None:
        self._keep(self.stderr, str(message.line))

    def on_result(self, result: Any) -> None:
        # Jupyter shows the value of a trailing expression as a result; print it like a REPL.
        text = getattr(result, "text", None)
        if text:
            self._keep(self.stdout, text if text.endswith("\n") else text + "\n")

    def on_error(self, error: Any) -> None:
        self.error = error


class E2BSandbox:
    """Runs code in E2B sandboxes: a new sandbox per call, or one reused until ``close()``.

    With ``reuse=True`` state persists between calls (it is one Jupyter kernel); a sandbox whose
    call timed out or overflowed is killed and replaced, since its kernel may still be busy.
    Calls on one instance must not overlap.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        reuse: bool = False,
        api_key: str | None = None,
        template: str | None = None,
        sandbox_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.reuse = reuse
        self._api_key = api_key
        self._template = template
        self._sandbox_timeout_s = sandbox_timeout_s
        self._request_timeout_s = request_timeout_s
        self._sandbox: Any = None

    def _options(self) -> dict[str, Any]:
        api_key = self._api_key or os.getenv("E2B_API_KEY")
        if not api_key and not e2b_debug_mode():
            raise E2BUnavailableError(
                "the E2B backend needs an API key: set E2B_API_KEY (or pass api_key=...)"
            )
        options: dict[str, Any] = {
            "timeout": self._sandbox_timeout_s,
            "request_timeout": self._request_timeout_s,
        }
        if api_key:
            options["api_key"] = api_key
        if self._template:
            options["template"] = self._template
        return options

    async def run(self, code: str, timeout_s: float | None = None) -> SandboxResult:
        """Run ``code`` for at most ``timeout_s`` (default: the limits'); errors of the code
        come back in the result, not as exceptions."""
        sandbox_class, timeout_error = _load_sdk()
        options = self._options()
        started = time.monotonic()
        sandbox = self._sandbox or await sandbox_class.create(**options)
        capture = _Capture(self.limits.max_output_bytes)
        ending: str | None = None
        healthy = False
        try:
            await sandbox.run_code(
                code,
                timeout=self.limits.timeout_s if timeout_s is None else timeout_s,
                on_stdout=capture.on_stdout,
                on_stderr=capture.on_stderr,
                on_result=capture.on_result,
                on_error=capture.on_error,
            )
            healthy = True
        except timeout_error:
            ending = KILLED_TIMEOUT
        except _OutputOverflow:
            ending = KILLED_OUTPUT
        finally:
            await self._after_call(sandbox, keep=healthy)
        result = _to_result(capture, ending)
        result.duration_s = round(time.monotonic() - started, 4)
        return result

    async def _after_call(self, sandbox: Any, keep: bool) -> None:
        if self.reuse and keep:
            self._sandbox = sandbox
            return
        self._sandbox = None
        with contextlib.suppress(Exception):  # it would die at its own timeout anyway
            await sandbox.kill()

    async def close(self) -> None:
        """Kill the reused sandbox, if any."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            with contextlib.suppress(Exception):
                await sandbox.kill()

    async def __aenter__(self) -> E2BSandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _to_result(capture: _Capture, ending: str | None) -> SandboxResult:
    stderr = "".join(capture.stderr)
    exit_code: int | None = None if ending else 0
    if capture.error is not None and ending is None:
        error = capture.error
        traceback = _ANSI.sub("", str(getattr(error, "traceback", "") or "")).rstrip()
        summary = f"{getattr(error, 'name', 'Error')}: {getattr(error, 'value', '')}".rstrip(": ")
        if not traceback.endswith(summary):
            traceback = f"{traceback}\n{summary}".lstrip("\n")
        stderr = f"{stderr}{traceback}\n"
        exit_code = 1
    return SandboxResult(
        stdout="".join(capture.stdout),
        stderr=stderr,
        exit_code=exit_code,
        timed_out=ending == KILLED_TIMEOUT,
        killed_reason=ending,
        output_truncated=capture.truncated,
    )


__all__ = ["E2BSandbox", "E2BUnavailableError", "e2b_debug_mode"]
