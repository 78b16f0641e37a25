"""Machines that refuse some layers: the result names what is missing, and what remains holds.

The probe's findings are replaced by weaker ones (as a kernel refusing namespaces or a missing
libseccomp would leave them), so these run on any machine that grants the layers they keep.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import replace

import pytest
import test_sandbox_containment as host_cases

from agentflow_env.tools.base import ToolContext, ToolResult
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.sandbox import SandboxLimits, SandboxSupport, namespaces, sandbox_support
from agentflow_env.tools.sandbox.support import (
    HIDEPID_PROC,
    PID_NAMESPACE,
    _cache_key,
    _support_cache,
)

LIMITS = SandboxLimits(timeout_s=5.0, cpu_s=5, memory_bytes=256 * 1024 * 1024)


def pretend(monkeypatch: pytest.MonkeyPatch, **weaker: object) -> SandboxSupport:
    """Make this process's sandbox use the real findings with ``weaker`` ones instead."""
    weakened = replace(sandbox_support(LIMITS), **weaker)
    monkeypatch.setitem(_support_cache, _cache_key(LIMITS), weakened)
    return weakened


def call(code: str) -> ToolResult:
    return asyncio.run(run_tool(PythonTool(limits=LIMITS), {"code": code}, ToolContext()))


def test_without_namespaces_the_filter_refuses_ip_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    if not sandbox_support(LIMITS).seccomp:
        pytest.skip("this machine does not grant this layer (unix_sockets); the result says so")
    pretend(monkeypatch, network="seccomp", ipc=False, private_dirs=(), pids=None, userns=False)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        result = call(
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    print('CONNECTED')\n"
            "except OSError as error:\n"
            "    print('refused', type(error).__name__)\n"
        )
        with pytest.raises(BlockingIOError):  # nothing reached the host's listener
            server.accept()
    finally:
        server.close()
    assert result.ok, result
    assert result.output.strip() == "refused PermissionError"
    missing = set(result.metadata["not_isolated"]) - {"uid"}
    assert missing == {"pid_namespace", "processes", "ipc", "tmp"}  # network holds


def test_missing_layers_are_named_in_every_result(monkeypatch: pytest.MonkeyPatch) -> None:
    weakened = pretend(monkeypatch, network=None, ipc=False, private_dirs=(), seccomp=False)
    assert weakened.not_isolated[-4:] == ("network", "ipc", "tmp", "unix_sockets")
    result = call("print(6 * 7)")
    assert result.ok and result.output == "42\n"
    assert result.metadata["not_isolated"] == list(weakened.not_isolated)


def test_namespaces_made_in_a_user_namespace_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root whose kernel refuses namespaces to root itself makes them in a user namespace, as a
    normal user does: the IPC and /tmp cases hold there too."""
    real = sandbox_support(LIMITS)
    if "ipc" in real.not_isolated or "tmp" in real.not_isolated:
        pytest.skip("this machine does not grant this layer (ipc) or (tmp); the result says so")
    network = "userns" if real.network in ("netns", "userns") else real.network
    pretend(monkeypatch, userns=True, network=network)
    tool = PythonTool(limits=LIMITS)
    host_cases.test_system_v_ipc_objects_do_not_outlive_the_call(tool)
    host_cases.test_posix_message_queues_do_not_outlive_the_call(tool)
    host_cases.test_files_in_tmp_and_dev_shm_do_not_outlive_the_call(tool)
    # It ran in a user namespace that maps its own uid only.
    result = call("import os\nprint(open('/proc/self/uid_map').read().split(), os.getuid())")
    assert result.ok, result
    mapped, uid = result.output.rsplit(" ", 1)
    assert mapped == str([uid.strip()] * 2 + ["1"])
    # Its PID namespace's init runs as its uid there: still nothing of it, nor of us, is read.
    if "processes" not in real.not_isolated:
        host_cases.assert_other_processes_hidden(*host_cases.walk_proc())


def test_without_a_pid_namespace_proc_hides_other_uids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback where the kernel refuses a PID namespace: a /proc mounted with
    hidepid=invisible shows only the call's own uid, which as root is the call's alone."""
    real = sandbox_support(LIMITS)
    pretend(monkeypatch, pids=HIDEPID_PROC)
    started = call("print(1)")
    if not real.drops_privileges:
        # A normal user may not mount a /proc of the host's PID namespace: the probe leaves the
        # fallback out, and results name "processes" where no PID namespace is granted either.
        assert not started.ok and "mount(b'/proc')" in (started.error or ""), started
        return
    if "processes" in real.not_isolated:
        pytest.skip("this machine does not grant this layer (processes); the result says so")
    if not started.ok and real.pids == PID_NAMESPACE:
        pytest.skip(f"this kernel refuses the fallback (5.8+ only), not a PID namespace: {started}")
    result, report, secret, name = host_cases.walk_proc()
    host_cases.assert_other_processes_hidden(result, report, secret, name)
    assert "pid_namespace" in result.not_isolated and "processes" not in result.not_isolated
    assert report["pid"] != 2 and "1" not in report["seen"]  # the host's PIDs, init hidden


def test_a_refused_pid_namespace_is_named_and_the_fallback_probed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel that refuses PID namespaces: the probe falls back to a hidepid /proc where it
    can (root), and every result names what is missing."""
    real = sandbox_support(LIMITS)

    def refuse() -> None:
        raise PermissionError("unshare(CLONE_NEWPID): refused here")

    monkeypatch.setattr(namespaces, "_fork_into_pid_namespace", refuse)
    monkeypatch.delitem(_support_cache, _cache_key(LIMITS))
    probed = sandbox_support(LIMITS)  # probed again, with the refusal
    assert probed.pids != PID_NAMESPACE and "pid_namespace" in probed.not_isolated
    if probed.pids == HIDEPID_PROC:
        assert real.drops_privileges and "processes" not in probed.not_isolated
        result, report, secret, name = host_cases.walk_proc()
        host_cases.assert_other_processes_hidden(result, report, secret, name)
    else:  # a normal user may not mount a /proc of the host's PID namespace, nor root before 5.8
        assert probed.pids is None and "processes" in probed.not_isolated
    result = call("print(6 * 7)")
    assert result.ok and result.output == "42\n"
    assert result.metadata["not_isolated"] == list(probed.not_isolated)


def test_a_parent_holding_many_descriptors_still_starts_sandboxes() -> None:
    """A trainer process holds hundreds of files and sockets; the child's descriptor limit must
    not bite while the child still holds them (before exec closes them)."""
    assert_starts_with_many_descriptors_held()


def test_many_descriptors_held_in_a_user_namespace_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same where the namespaces are made in a user namespace, whose setup opens files
    (the uid and gid maps)."""
    if sandbox_support(LIMITS).network not in ("netns", "userns"):
        pytest.skip("this machine does not grant namespaces; the result says so")
    pretend(monkeypatch, userns=True, network="userns")
    assert_starts_with_many_descriptors_held()


def assert_starts_with_many_descriptors_held() -> None:
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(3 * LIMITS.max_open_files)]
    try:
        result = call("import os\nprint(len(os.listdir('/proc/self/fd')))")
    finally:
        for fd in held:
            os.close(fd)
    assert result.ok, result
    assert int(result.output.strip()) < 16  # the parent's descriptors did not leak in
