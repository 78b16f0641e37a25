"""Running one call: ``run_python`` starts the sandboxed interpreter and collects its output.

Output is capped (``_Collector``); the call ends when the process exits, the output cap is
exceeded or the timeout passes, and then everything it started is killed (its PID namespace where
it has one, by uid where it has its own, else by process group) and its directory removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from agentflow_env.tools.sandbox.isolation import _CODE_FILE, _argv, _child_env, _Plan
from agentflow_env.tools.sandbox.limits import (
    KILLED_CPU,
    KILLED_OUTPUT,
    KILLED_TIMEOUT,
    SandboxError,
    SandboxLimits,
    SandboxResult,
)
from agentflow_env.tools.sandbox.support import (
    CURRENT_USER,
    PER_CALL_UID,
    SHARED_UID,
    _cache_key,
    _support_cache,
    sandbox_support,
)
from agentflow_env.tools.sandbox.uids import (
    _NOBODY,
    _acquire_uid,
    _current_user_tasks,
    _kill_uid,
    _release_uid,
)

_DRAIN_GRACE_S = 2.0


class _Collector(asyncio.SubprocessProtocol):
    """Keeps at most ``cap`` bytes of stdout+stderr; signals when the cap is exceeded."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0
        self.buffers = {1: bytearray(), 2: bytearray()}
        self.truncated = False
        self.exited = asyncio.Event()
        self.overflow = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        room = self.cap - self.used
        if len(data) > room:
            data = data[: max(room, 0)]
            self.truncated = True
            self.overflow.set()
        self.buffers[fd] += data
        self.used += len(data)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def text(self, fd: int) -> str:
        return self.buffers[fd].decode("utf-8", errors="replace")


async def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``code`` in a new sandboxed interpreter; never raises for failures of the code.

    Raises ``SandboxError`` only if the sandbox itself cannot start.
    """
    limits = limits or SandboxLimits()
    support = _support_cache.get(_cache_key(limits))
    if support is None:  # the first call probes (a few short subprocesses) off the event loop
        support = await asyncio.to_thread(sandbox_support, limits)
    started = time.monotonic()
    uid: int | None = None
    if support.run_as == PER_CALL_UID:
        uid = await _acquire_uid(started + limits.timeout_s)
    elif support.run_as == SHARED_UID:
        uid = _NOBODY
    if support.run_as == CURRENT_USER:
        nproc = _current_user_tasks() + limits.max_processes
    else:
        nproc = limits.max_processes
    plan = support._plan(uid, nproc)
    workdir: str | None = None
    try:
        workdir = tempfile.mkdtemp(prefix="agentflow-sandbox-")
        code_path = os.path.join(workdir, _CODE_FILE)
        with open(code_path, "w", encoding="utf-8") as handle:
            handle.write(code)
        if uid is not None:
            os.chown(workdir, uid, uid)
            os.chown(code_path, uid, uid)
        result = await _execute(support.interpreter, plan, workdir, limits)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        if support.run_as == PER_CALL_UID and uid is not None:
            _release_uid(uid)
    result.duration_s = round(time.monotonic() - started, 4)
    result.not_isolated = support.not_isolated
    return result


_START_ATTEMPTS = 2
_START_RETRY_S = 0.05


async def _execute(
    interpreter: str, plan: _Plan, workdir: str, limits: SandboxLimits
) -> SandboxResult:
    transport, collector = await _start(interpreter, plan, workdir, limits)
    ending = KILLED_TIMEOUT
    try:
        ending = await _wait_for_end(collector, limits.timeout_s)
    finally:
        await _kill_all(transport, plan)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(collector.closed.wait(), _DRAIN_GRACE_S)
        transport.close()
    exit_code = transport.get_returncode()
    killed_reason = None
    if ending in (KILLED_TIMEOUT, KILLED_OUTPUT):
        killed_reason = ending
    elif exit_code == -signal.SIGXCPU:
        killed_reason = KILLED_CPU
    return SandboxResult(
        stdout=collector.text(1),
        stderr=collector.text(2),
        exit_code=exit_code,
        timed_out=ending == KILLED_TIMEOUT,
        killed_reason=killed_reason,
        output_truncated=collector.truncated,
    )


async def _start(
    interpreter: str, plan: _Plan, workdir: str, limits: SandboxLimits
) -> tuple[asyncio.SubprocessTransport, _Collector]:
    """Start the child; a start that fails (a transient kernel refusal under load) is retried
    once, and the error names the setup step that failed."""
    loop = asyncio.get_running_loop()
    failures: list[str] = []
    for attempt in range(_START_ATTEMPTS):
        if attempt:
            await asyncio.sleep(_START_RETRY_S)
        report_r, report_w = os.pipe()
        try:
            return await loop.subprocess_exec(
                lambda: _Collector(limits.max_output_bytes),
                *plan.command(_argv(interpreter)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=_child_env(workdir),
                start_new_session=True,
                close_fds=True,
                preexec_fn=plan.preexec(limits, workdir, report_fd=report_w),
            )
        except (OSError, subprocess.SubprocessError) as error:
            os.close(report_w)
            report_w = -1
            os.set_blocking(report_r, False)  # a concurrent fork may still hold the write end
            try:
                detail = os.read(report_r, 512).decode("utf-8", "replace")
            except BlockingIOError:
                detail = ""
            failures.append(f"{error}" + (f" ({detail})" if detail else ""))
        finally:
            if report_w >= 0:
                os.close(report_w)
            os.close(report_r)
    raise SandboxError("the sandbox process could not start: " + "; then ".join(failures))


async def _wait_for_end(collector: _Collector, timeout_s: float) -> str:
    exited = asyncio.ensure_future(collector.exited.wait())
    overflow = asyncio.ensure_future(collector.overflow.wait())
    try:
        done, _ = await asyncio.wait(
            {exited, overflow}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        exited.cancel()
        overflow.cancel()
    if overflow in done:
        return KILLED_OUTPUT
    if exited in done:
        return "exited"
    return KILLED_TIMEOUT


async def _kill_all(transport: asyncio.SubprocessTransport, plan: _Plan) -> None:
    """Kill everything the call started: its PID namespace where it has one, by uid where it has
    its own, else by process group."""
    pid = transport.get_pid()
    if plan.namespaces.pid_namespace and transport.get_returncode() is None:
        # The process started waits outside for the namespace's init, which its death kills
        # (parent-death signal); the kernel then kills everything in the namespace.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if plan.uid is not None and plan.uid != _NOBODY and await _kill_uid(plan.uid):
        return
    if transport.get_returncode() is None or plan.uid is None or plan.uid == _NOBODY:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


__all__ = ["run_python"]
