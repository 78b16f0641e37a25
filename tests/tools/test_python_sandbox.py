"""The local Python sandbox and tool: hostile code ends as an error observation, nothing leaks.

Every hostile case is followed by ``print(1+1)`` to show the tool is still usable. What the
machine grants is read when each case runs (``support()``, not at import), so that
``tests/tools/test_sandbox_unprivileged.py`` can run these cases again as an unprivileged user.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentflow_env.tools.base import ToolContext, ToolResult
from agentflow_env.tools.python_tool import PythonTool, extract_code
from agentflow_env.tools.registry import make_tool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.sandbox import (
    KILLED_CPU,
    PER_CALL_UID,
    SandboxLimits,
    SandboxSupport,
    run_python,
    sandbox_support,
    sandbox_uid_range,
)

LIMITS = SandboxLimits(timeout_s=1.5, cpu_s=5, max_output_bytes=64 * 1024)


def support() -> SandboxSupport:
    return sandbox_support(LIMITS)


def require_other_uid() -> None:
    if not support().drops_privileges:
        pytest.skip(
            "the sandbox runs as the current user here (not root): it could signal or read us"
        )


@pytest.fixture(scope="module")
def tool() -> PythonTool:
    return PythonTool(limits=LIMITS)


def call(tool: PythonTool, code: str) -> ToolResult:
    return asyncio.run(run_tool(tool, {"code": code}, ToolContext()))


def assert_still_usable(tool: PythonTool) -> None:
    result = call(tool, "print(1+1)")
    assert result.ok, result
    assert result.output.strip() == "2"


def sandbox_processes_alive() -> list[int]:
    """Non-zombie processes running as one of this test process's sandbox uids."""
    uids = sandbox_uid_range()
    alive = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        uid = int(fields["Uid"].split()[0])
        if uid in uids and not fields["State"].strip().startswith("Z"):
            alive.append(int(entry.name))
    return alive


def test_registered_and_card(tool: PythonTool) -> None:
    made = make_tool("python")
    assert isinstance(made, PythonTool)
    assert made.card.name == "Python"
    assert made.card.primary_argument == "code"
    assert made.card.input_schema["code"]["required"] is True
    # The tool stops itself at the runner's limit; the runner gives it a grace to report.
    assert tool.timeout_s == LIMITS.timeout_s
    assert tool.stop_grace_s is not None and tool.stop_grace_s > 0


def test_normal_code_returns_stdout(tool: PythonTool) -> None:
    result = call(tool, "x = sum(range(101))\nprint('sum', x)")
    assert result.ok and result.error is None
    assert result.output == "sum 5050\n"
    assert result.metadata["exit_code"] == 0


def test_fenced_code_and_trailing_expression(tool: PythonTool) -> None:
    result = call(tool, "Compute it:\n```python\nimport math\nmath.factorial(10)\n```\nthanks")
    assert result.ok, result
    assert result.output.strip() == "3628800"
    assert extract_code("```py\n  a = 1\n  print(a)\n```") == "a = 1\nprint(a)\n"
    assert extract_code("print(3)") == "print(3)\n"


def test_exception_is_readable(tool: PythonTool) -> None:
    result = call(tool, "values = [1, 2]\nvalues[5]")
    assert not result.ok
    assert result.error == "exited with code 1: IndexError: list index out of range"
    assert 'File "main.py", line 2' in result.output
    assert "_agentflow_run" not in result.output  # the bootstrap's frames are hidden
    assert_still_usable(tool)


def test_infinite_loop_times_out_and_temp_dir_is_removed(tool: PythonTool) -> None:
    result = call(tool, "import os\nprint(os.getcwd())\nwhile True:\n    pass")
    assert not result.ok
    assert result.error == "timed out after 1.5 s"
    assert result.metadata["timed_out"] is True
    workdir = result.output.splitlines()[0]  # printed before the loop: output is unbuffered
    assert "agentflow-sandbox-" in workdir
    assert not os.path.exists(workdir)
    assert_still_usable(tool)


def test_home_and_tmpdir_are_the_calls_own_directory(
    tool: PythonTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_home = f"/nonexistent/parent-home-{uuid.uuid4().hex}"
    parent_tmp = f"/nonexistent/parent-tmp-{uuid.uuid4().hex}"
    monkeypatch.setenv("HOME", parent_home)
    monkeypatch.setenv("TMPDIR", parent_tmp)
    code = (
        "import os, tempfile\n"
        "print(os.getcwd())\n"
        "print(os.environ['HOME'])\n"
        "print(os.environ['TMPDIR'])\n"
        "print(os.path.expanduser('~'))\n"
        "print(tempfile.gettempdir())\n"
        "handle, path = tempfile.mkstemp()\n"
        "print(os.path.dirname(path))\n"
        "print(sorted(os.listdir('.')))\n"
    )
    result = call(tool, code)
    assert result.ok, result
    workdir, home, tmpdir, expanded, gettempdir, mkstemp_dir, listing = result.output.splitlines()
    assert os.path.basename(workdir).startswith("agentflow-sandbox-")
    assert home == tmpdir == expanded == gettempdir == mkstemp_dir == workdir
    assert listing.startswith("['main.py', 'tmp")  # the file mkstemp made is in this call's dir
    assert parent_home not in result.output and parent_tmp not in result.output
    assert not os.path.exists(workdir)  # and it is gone with the call
    second = call(tool, "import os\nprint(os.environ['HOME'])")
    assert second.ok and second.output.strip() != workdir  # every call gets its own


def test_temp_dir_removed_after_normal_run(tool: PythonTool) -> None:
    result = call(tool, "import os\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd())")
    assert result.ok, result
    assert not os.path.exists(result.output.strip())


def test_fork_bomb_is_contained(tool: PythonTool) -> None:
    if not support().drops_privileges and os.geteuid() == 0:
        pytest.skip("running as root without a dropped uid: RLIMIT_NPROC cannot apply")
    result = call(tool, "import os\nwhile True:\n    os.fork()")
    assert not result.ok
    assert result.error  # the bomb hit the process limit (EAGAIN), the timeout or the output cap
    if support().run_as == PER_CALL_UID:
        assert sandbox_processes_alive() == []
    assert_still_usable(tool)


def test_fork_bomb_that_ignores_errors_stays_under_the_limit(tool: PythonTool) -> None:
    if support().run_as != PER_CALL_UID:
        pytest.skip("per-call uids need root")
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = call(tool, code)
    assert not result.ok and result.metadata["timed_out"]
    assert sandbox_processes_alive() == []
    assert_still_usable(tool)


def test_huge_allocation_is_a_memory_error(tool: PythonTool) -> None:
    result = call(tool, "data = bytearray(8 * 1024**3)")
    assert not result.ok
    assert result.error is not None and result.error.startswith("memory limit exceeded (512 MiB)")
    assert "MemoryError" in result.output
    assert_still_usable(tool)


def test_writing_outside_the_temp_dir_fails(tool: PythonTool) -> None:
    require_other_uid()
    name = f"agentflow-sandbox-test-{uuid.uuid4().hex}"
    repo_target = Path(__file__).resolve().parent / name
    etc_target = Path("/etc") / name
    code = (
        "import os\n"
        "open('inside.txt', 'w').write('fine')\n"
        f"for path in ({str(etc_target)!r}, {str(repo_target)!r}):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as error:\n"
        "        print('denied', type(error).__name__)\n"
    )
    result = call(tool, code)
    assert result.ok, result
    assert "WROTE" not in result.output
    # Refused, or invisible: a checkout under /tmp is hidden by the call's private /tmp.
    outcomes = result.output.splitlines()
    assert len(outcomes) == 2, result.output
    assert set(outcomes) <= {"denied PermissionError", "denied FileNotFoundError"}
    assert outcomes[0] == "denied PermissionError"  # /etc is visible and not writable
    assert not etc_target.exists() and not repo_target.exists()
    assert_still_usable(tool)


def test_files_left_in_tmp_are_removed(tool: PythonTool) -> None:
    if support().run_as != PER_CALL_UID and "tmp" in support().not_isolated:
        pytest.skip("no private /tmp here and no per-call uid to find leftovers by")
    leak = f"/tmp/agentflow-sandbox-leak-{uuid.uuid4().hex}"
    result = call(tool, f"open({leak!r}, 'w').write('x')\nprint('ok')")
    assert result.ok, result
    assert not os.path.exists(leak)


def test_secrets_in_the_parent_environment_do_not_leak(
    tool: PythonTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-fake-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTFLOW_FAKE_API_KEY", secret)
    code = (
        "import os\n"
        "print('env', os.environ.get('AGENTFLOW_FAKE_API_KEY'))\n"
        "print('vars', sorted(os.environ))\n"
        "try:\n"
        "    data = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
        "    print('parent environ', data.decode(errors='replace'))\n"
        "except OSError as error:\n"
        "    print('parent environ denied', type(error).__name__)\n"
    )
    result = call(tool, code)
    assert result.ok, result
    assert secret not in result.output
    assert "env None" in result.output
    if "pid_namespace" not in support().not_isolated:
        # Its parent is its PID namespace's init, started with the same rebuilt environment.
        assert "AGENTFLOW_FAKE_API_KEY" not in result.output
    elif support().drops_privileges or support().userns:  # another uid, or user namespace
        assert "parent environ denied PermissionError" in result.output
    assert_still_usable(tool)


def test_network_is_unreachable(tool: PythonTool) -> None:
    if not support().network_isolated:
        pytest.skip("no network namespace here (needs root or unprivileged user namespaces)")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "print('CONNECTED')\n"
        )
        result = call(tool, code)
        with pytest.raises(OSError):  # nothing ever reached our server
            server.accept()
    finally:
        server.close()
    assert not result.ok
    assert "CONNECTED" not in result.output
    refusal = "PermissionError" if support().network == "seccomp" else "OSError"
    assert result.error is not None and refusal in result.error
    assert_still_usable(tool)


def test_printing_a_gigabyte_is_cut_at_the_cap(tool: PythonTool) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nchunk = 'x' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    result = call(tool, code)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert not result.ok
    assert result.error == "output exceeded 65536 bytes"
    assert result.metadata["output_truncated"] is True
    assert result.metadata["timed_out"] is False  # killed at the cap, not at the timeout
    assert result.metadata["killed_reason"] == "output_limit"
    assert grown_kib < 64 * 1024  # nothing like a gigabyte was buffered
    assert_still_usable(tool)


def test_killing_the_parent_fails(tool: PythonTool) -> None:
    if "pid_namespace" not in support().not_isolated:
        # Its parent is its PID namespace's init, which ignores SIGKILL from inside; nothing
        # outside the namespace can be named, nor reached by kill(-1).
        code = (
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)"
        )
        result = call(tool, code)
        assert not result.ok
        assert result.error is not None and "ProcessLookupError" in result.error
        assert_still_usable(tool)  # and we are still alive to check it
        return
    require_other_uid()
    result = call(tool, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not result.ok
    assert result.error is not None and "PermissionError" in result.error
    assert_still_usable(tool)  # and we are still alive to check it


def test_daemonized_children_are_killed(tool: PythonTool) -> None:
    """Killed by uid, or with the call's PID namespace; found by a name given to the child
    (with a PID namespace the pid it prints is not the host's)."""
    if not support().drops_privileges and "pid_namespace" in support().not_isolated:
        pytest.skip("no uid to sweep by, nor a PID namespace here (pid_namespace)")
    name = f"sbx{uuid.uuid4().hex[:12]}"
    code = (
        "import ctypes, os, time\n"
        "ready, tell = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        f"    ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)  # PR_SET_NAME\n"
        "    os.write(tell, b'x')\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.read(ready, 1)\n"
        "print(pid)\n"
    )
    result = call(tool, code)
    assert result.ok, result
    assert int(result.output.strip()) > 0
    deadline = time.monotonic() + 2
    while (survivors := processes_named(name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not survivors, f"the daemonized child survived: {survivors}"


def processes_named(name: str) -> list[int]:
    """Pids of the host's processes called ``name`` that are not zombies (killed, waiting to be
    reaped)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                head, tail = stat.read().rsplit(")", 1)
        except OSError:
            continue
        if head.split("(", 1)[1] == name and tail.split()[0] != "Z":
            found.append(int(entry.name))
    return found


def test_cpu_limit(tool: PythonTool) -> None:
    limits = SandboxLimits(timeout_s=20, cpu_s=1)
    result = asyncio.run(run_python("while True:\n    pass", limits))
    assert not result.ok
    assert result.killed_reason == KILLED_CPU
    assert not result.timed_out


def test_concurrent_calls(tool: PythonTool) -> None:
    async def many() -> list[Any]:
        return await asyncio.gather(*(run_python(f"print({n} * {n})", LIMITS) for n in range(8)))

    results = asyncio.run(many())
    assert [r.stdout.strip() for r in results] == [str(n * n) for n in range(8)]


def test_cancelled_call_still_cleans_up(tool: PythonTool) -> None:
    """A call cancelled mid-run (e.g. its episode is dropped) still removes what it made."""
    code = "import os, time\nprint(os.getcwd(), flush=True)\nwhile True:\n    pass"

    async def cancelled() -> None:
        await asyncio.wait_for(tool.run({"code": code}, ToolContext()), timeout=0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(cancelled())
    leftovers = [path for path in Path(tempfile.gettempdir()).glob("agentflow-sandbox-*")]
    assert not [path for path in leftovers if path.stat().st_uid in sandbox_uid_range()]
    if support().run_as == PER_CALL_UID:
        assert sandbox_processes_alive() == []
    assert_still_usable(tool)


def test_a_failed_start_is_retried_and_names_the_failing_step(
    tool: PythonTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentflow_env.tools.sandbox import isolation

    assert call(tool, "print(1)").ok  # the machine's support is probed (and cached) first

    calls: list[int] = []

    def refuse(self: Any, workdir: str, tmpfs_bytes: int) -> None:
        raise PermissionError("the kernel said no")

    monkeypatch.setattr(isolation.Namespaces, "enter_as_root", refuse)
    original = isolation._Plan.preexec

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(isolation._Plan, "preexec", counting)
    result = call(tool, "print(1)")
    assert not result.ok and result.metadata.get("kind") == "sandbox"
    assert "namespaces (as root): PermissionError: the kernel said no" in (result.error or "")
    assert len(calls) == 2  # one retry, then a readable failure
