"""Limits of one sandboxed call, what it produced, and a readable reason when it failed.

Shared by both backends of the Python tool: the local sandbox (``runner.run_python``) and E2B
(``agentflow_env.tools.e2b_sandbox``) return a ``SandboxResult`` judged against ``SandboxLimits``.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB

KILLED_TIMEOUT = "timeout"
KILLED_OUTPUT = "output_limit"
KILLED_CPU = "cpu_limit"


class SandboxError(RuntimeError):
    """The sandbox itself could not run (not the code in it)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one call. CPU seconds, address space and file size hold per process.

    ``max_processes`` counts processes and threads of the sandbox's uid (``RLIMIT_NPROC``).
    ``tmpfs_bytes`` caps each private tmpfs a call gets for /tmp, /dev/shm & co (in memory).
    ``isolate_network`` and ``drop_privileges`` ask for those layers where the OS allows them;
    ``sandbox_support()`` says what was granted.
    """

    # 8 s, so that a step running a program that hangs stays within the env's 10 s step budget.
    timeout_s: float = 8.0
    cpu_s: int = 8
    memory_bytes: int = 512 * MIB
    max_processes: int = 32
    max_output_bytes: int = 64 * KIB
    max_file_bytes: int = 16 * MIB
    max_open_files: int = 64
    tmpfs_bytes: int = 64 * MIB
    isolate_network: bool = True
    drop_privileges: bool = True

    def __post_init__(self) -> None:
        positive = ("timeout_s", "cpu_s", "memory_bytes", "max_processes", "max_output_bytes")
        for name in positive + ("tmpfs_bytes",):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        if self.max_open_files < 16:
            raise ValueError("SandboxLimits.max_open_files must be at least 16")


@dataclass
class SandboxResult:
    """What one execution produced. ``exit_code`` < 0 means killed by that signal.

    ``not_isolated`` names the local sandbox's layers this machine did not grant for the call
    (``SandboxSupport.not_isolated``: "uid", "pid_namespace", "processes", "network", "ipc",
    "tmp", "unix_sockets").
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    killed_reason: str | None = None
    output_truncated: bool = False
    duration_s: float = 0.0
    not_isolated: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated


def describe_failure(
    result: SandboxResult, limits: SandboxLimits, *, local: bool = True
) -> str | None:
    """A short readable reason why ``result`` failed, or ``None`` if it succeeded.

    ``local=False`` (E2B) leaves out the local memory limit, which does not apply there.
    """
    if result.ok:
        return None
    if result.timed_out:
        return f"timed out after {limits.timeout_s:g} s"
    if result.output_truncated:
        return f"output exceeded {limits.max_output_bytes} bytes"
    last = _last_line(result.stderr)
    if last.startswith("MemoryError"):
        size = f" ({limits.memory_bytes // MIB} MiB)" if local else ""
        return f"memory limit exceeded{size}: {last}"
    if result.killed_reason == KILLED_CPU:
        return f"CPU time limit exceeded ({limits.cpu_s} s)"
    code = result.exit_code
    if code is None:
        return result.killed_reason or "the execution did not finish"
    if code < 0:
        name = _signal_name(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {code}: {last}" if last else f"exited with code {code}"


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


__all__ = [
    "KIB",
    "KILLED_CPU",
    "KILLED_OUTPUT",
    "KILLED_TIMEOUT",
    "MIB",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "describe_failure",
]
