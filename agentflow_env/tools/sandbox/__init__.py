"""Run untrusted Python in a fresh, limited, unprivileged process (the Python tool's local backend).

Every call gets a new interpreter in a new temporary directory, with a scrubbed environment,
stdin closed, its own session, rlimits (CPU, address space, processes, file size, open files, no
core dumps) and, where the OS allows it, its own network, IPC, mount and PID namespaces (no
network, no System V or POSIX IPC shared with the host, a private tmpfs on /tmp, /dev/shm & co,
a /proc that shows only its own processes), a seccomp filter refusing host unix sockets, and its
own unprivileged uid. Running as root, each call runs as a uid of its own, so that
``RLIMIT_NPROC`` applies (it never applies to root), the child can neither signal nor inspect the
parent, and every process the call left behind is killed by uid when it ends. What this machine does not grant is named in every result
(``SandboxResult.not_isolated``); ``docs/sandbox.md`` lists what is and is not isolated.

Modules: ``limits`` (limits, results, failure descriptions), ``isolation`` (how one child is
set up before exec), ``namespaces`` and ``seccomp`` (two of those layers), ``syscalls`` (the
libc calls they make), ``support`` (probing what this machine grants), ``uids`` (the per-call
uid pool and cleanup) and ``runner`` (``run_python``). The ``Python`` tool built on it is in
``agentflow_env.tools.python_tool``.
"""

from agentflow_env.tools.sandbox.limits import (
    KIB,
    KILLED_CPU,
    KILLED_OUTPUT,
    KILLED_TIMEOUT,
    MIB,
    SandboxError,
    SandboxLimits,
    SandboxResult,
    describe_failure,
)
from agentflow_env.tools.sandbox.runner import run_python
from agentflow_env.tools.sandbox.support import (
    CURRENT_USER,
    PER_CALL_UID,
    SHARED_UID,
    SandboxSupport,
    sandbox_support,
)
from agentflow_env.tools.sandbox.uids import sandbox_uid_range

__all__ = [
    "CURRENT_USER",
    "KIB",
    "KILLED_CPU",
    "KILLED_OUTPUT",
    "KILLED_TIMEOUT",
    "MIB",
    "PER_CALL_UID",
    "SHARED_UID",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSupport",
    "describe_failure",
    "run_python",
    "sandbox_support",
    "sandbox_uid_range",
]
