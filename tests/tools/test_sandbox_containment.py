"""What sandboxed code must not reach on the host: unix path sockets, System V and POSIX IPC,
files in /tmp and /dev/shm, other processes' command lines. Each case checks the host side after
the call (a listener that got nothing, no new IPC object, no file left) or plants what must not
be seen (a host process with a secret), not only what the sandboxed code printed.

``tests/tools/test_sandbox_unprivileged.py`` runs these cases again as an unprivileged user.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentflow_env.tools.base import ToolContext, ToolResult
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.sandbox import (
    MIB,
    SandboxLimits,
    SandboxResult,
    SandboxSupport,
    run_python,
    sandbox_support,
)
from agentflow_env.tools.sandbox.namespaces import shared_dirs

LIMITS = SandboxLimits(timeout_s=5.0, cpu_s=5)
_IPC_CREAT = 0o1000
_IPC_RMID = 0
_SYSV_TABLES = ("shm", "sem", "msg")

_libc = ctypes.CDLL(None, use_errno=True)


def support() -> SandboxSupport:
    return sandbox_support(LIMITS)


def require(layer: str) -> None:
    """Skip when this machine does not grant ``layer``, which the sandbox then reports."""
    if layer in support().not_isolated:
        pytest.skip(f"this machine does not grant this layer ({layer}); the result says so")


@pytest.fixture(scope="module")
def tool() -> PythonTool:
    return PythonTool(limits=LIMITS)


def call(tool: PythonTool, code: str) -> ToolResult:
    return asyncio.run(run_tool(tool, {"code": code}, ToolContext()))


def make_visible_dir() -> Path:
    """A new directory the sandbox sees as the host does: outside /tmp & co (of which it gets
    private copies) and reachable by other uids. Its owner and the sandbox's uid may use it."""
    hidden = [Path(path) for path in shared_dirs()]
    for base in (Path(__file__).resolve().parent, Path("/run")):
        walkable = all(os.stat(part).st_mode & 0o001 for part in (base, *base.parents))
        inside_hidden = any(base == path or path in base.parents for path in hidden)
        if walkable and not inside_hidden and os.access(base, os.W_OK):
            path = Path(tempfile.mkdtemp(prefix=".sbx-", dir=base))
            path.chmod(0o777)
            return path
    pytest.skip("no directory here is both visible to the sandbox and writable by this test")


@pytest.fixture
def host_dir() -> Iterator[Path]:
    path = make_visible_dir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_host_unix_path_sockets_are_unreachable(tool: PythonTool, host_dir: Path) -> None:
    require("unix_sockets")
    stream_path, dgram_path = str(host_dir / "stream.sock"), str(host_dir / "dgram.sock")
    if len(stream_path) > 100:
        pytest.skip("the repository path is too long for a unix socket address")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        listener.bind(stream_path)
        listener.listen(4)
        inbox.bind(dgram_path)
        for path in (stream_path, dgram_path):
            os.chmod(path, 0o777)  # the sandbox's uid could connect, were it not for the sandbox
        listener.setblocking(False)
        inbox.setblocking(False)
        code = (
            "import asyncio, os, socket\n"
            f"print('visible', os.path.exists({stream_path!r}))\n"
            "attempts = {\n"
            f"    'stream': lambda: socket.socket(socket.AF_UNIX).connect({stream_path!r}),\n"
            "    'dgram': lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)"
            f".sendto(b'x', {dgram_path!r}),\n"
            "    'pair': lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]"
            f".sendto(b'x', {dgram_path!r}),\n"
            "}\n"
            "for name, attempt in attempts.items():\n"
            "    try:\n"
            "        attempt()\n"
            "        print(name, 'REACHED')\n"
            "    except OSError as error:\n"
            "        print(name, 'refused', type(error).__name__)\n"
            "a, b = socket.socketpair()  # what asyncio and multiprocessing use still works\n"
            "a.send(b'ok')\n"
            "print('pair works', b.recv(2) == b'ok')\n"
            "asyncio.run(asyncio.sleep(0))\n"
            "print('asyncio works')\n"
        )
        result = call(tool, code)
        if "visible False" in result.output:
            pytest.skip("the test directory is not visible to the sandbox here")
        with pytest.raises(BlockingIOError):  # nobody connected
            listener.accept()
        with pytest.raises(BlockingIOError):  # nothing arrived
            inbox.recv(16)
    finally:
        listener.close()
        inbox.close()
    assert result.ok, result
    assert "REACHED" not in result.output
    assert result.output.count("refused PermissionError") == 3
    assert "pair works True" in result.output and "asyncio works" in result.output


def test_io_uring_is_refused(tool: PythonTool) -> None:
    """io_uring can create and connect sockets without the socket() system call."""
    require("unix_sockets")
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "params = ctypes.create_string_buffer(120)\n"
        "fd = libc.syscall(425, 8, params)  # io_uring_setup on x86_64 and aarch64\n"
        "print('fd', fd, 'errno', ctypes.get_errno())\n"
    )
    result = call(tool, code)
    assert result.ok, result
    assert result.output.strip() == f"fd -1 errno {errno.EPERM}"


def _sysv_keys(table: str) -> dict[int, int]:
    """key -> id of the System V objects this process's IPC namespace has (``ipcs``)."""
    with open(f"/proc/sysvipc/{table}") as handle:
        rows = [line.split() for line in handle.readlines()[1:]]
    return {int(row[0]): int(row[1]) for row in rows if row}


def _remove_sysv(table: str, ident: int) -> None:
    if table == "shm":
        _libc.shmctl(ident, _IPC_RMID, None)
    elif table == "sem":
        _libc.semctl(ident, 0, _IPC_RMID)
    else:
        _libc.msgctl(ident, _IPC_RMID, None)


def test_system_v_ipc_objects_do_not_outlive_the_call(tool: PythonTool) -> None:
    require("ipc")
    key = random.randrange(1 << 20, 1 << 30)
    before = {table: _sysv_keys(table) for table in _SYSV_TABLES}
    assert all(key not in keys for keys in before.values())
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"shm = libc.shmget({key}, ctypes.c_size_t(256 << 20), {_IPC_CREAT | 0o600})\n"
        f"sem = libc.semget({key}, 1, {_IPC_CREAT | 0o600})\n"
        f"msg = libc.msgget({key}, {_IPC_CREAT | 0o600})\n"
        "print('created', shm >= 0, sem >= 0, msg >= 0)\n"
    )
    result = call(tool, code)
    left = {table: _sysv_keys(table).get(key) for table in _SYSV_TABLES}
    for table, ident in left.items():
        if ident is not None:
            _remove_sysv(table, ident)  # do not leak 256 MiB when this fails
    assert result.ok, result
    assert result.output.strip() == "created True True True"  # it could create them...
    assert left == {"shm": None, "sem": None, "msg": None}  # ...and none is left on the host
    assert len(_sysv_keys("shm")) <= len(before["shm"])


def test_posix_message_queues_do_not_outlive_the_call(tool: PythonTool) -> None:
    require("ipc")
    name = f"/agentflow-test-{uuid.uuid4().hex[:16]}".encode()
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"fd = libc.mq_open({name!r}, os.O_CREAT | os.O_RDWR, ctypes.c_uint(0o600), None)\n"
        "print('created', fd >= 0)\n"
    )
    result = call(tool, code)
    fd = _libc.mq_open(name, os.O_RDONLY)
    if fd >= 0:
        os.close(fd)
        _libc.mq_unlink(name)
    assert result.ok, result
    assert result.output.strip() == "created True"
    assert fd == -1 and ctypes.get_errno() == errno.ENOENT


@contextlib.contextmanager
def host_made_dirs() -> Iterator[list[Path]]:
    """World-writable directories made by the host in /tmp and /dev/shm (as ``ipcs`` & co
    would find them): what the sandbox leaves inside them is not cleaned up by uid."""
    made = []
    try:
        for base in ("/tmp", "/dev/shm"):
            if os.path.isdir(base):
                path = Path(tempfile.mkdtemp(prefix="agentflow-shared-", dir=base))
                path.chmod(0o1777)
                made.append(path)
        yield made
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def test_files_in_tmp_and_dev_shm_do_not_outlive_the_call(tool: PythonTool) -> None:
    require("tmp")
    tag = uuid.uuid4().hex
    with host_made_dirs() as shared:
        targets = [f"/dev/shm/agentflow-leak-{tag}", f"/tmp/agentflow-leak-{tag}"]
        targets += [str(path / f"leak-{tag}") for path in shared]
        code = (
            f"for path in {targets!r}:\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "        print('wrote', path)\n"
            "    except OSError as error:\n"
            "        print('denied', path, type(error).__name__)\n"
        )
        result = call(tool, code)
        left = [path for path in targets if os.path.exists(path)]
        for path in left:
            os.unlink(path)
    assert result.ok, result
    # The sandbox may still use /tmp and /dev/shm (multiprocessing needs /dev/shm)...
    assert f"wrote /dev/shm/agentflow-leak-{tag}" in result.output
    assert f"wrote /tmp/agentflow-leak-{tag}" in result.output
    # ...but nothing it wrote there is on the host afterwards.
    assert left == []


# Walks /proc as model code probing for secrets would; reports what it read, and itself.
_WALK_PROC = """
import json, os
seen = {}
for pid in os.listdir('/proc'):
    if pid.isdigit():
        seen[pid] = {}
        for part in ('cmdline', 'environ', 'status'):
            try:
                with open(f'/proc/{pid}/{part}', 'rb') as handle:
                    seen[pid][part] = handle.read().decode('utf-8', 'replace')
            except OSError as error:
                seen[pid][part] = type(error).__name__
print(json.dumps({'pid': os.getpid(), 'self': os.readlink('/proc/self'), 'seen': seen}))
"""


@contextlib.contextmanager
def host_process_with_secrets() -> Iterator[tuple[str, str]]:
    """A host process with a secret in its command line and environment, and a unique name:
    like a trainer started with ``--api-key=...``."""
    secret = f"SECRET-MARKER-{uuid.uuid4().hex}"
    name = f"sbx{uuid.uuid4().hex[:12]}"
    code = (
        "import ctypes, time\n"
        f"ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)  # PR_SET_NAME\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [support().interpreter, "-S", "-c", code, f"--api-key={secret}"],
        env={"AGENTFLOW_TEST_SECRET": secret},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield secret, name
    finally:
        process.kill()
        process.wait()


def walk_proc() -> tuple[SandboxResult, dict[str, Any], str, str]:
    """What sandboxed code reads in /proc while a host process holds a secret: the result, its
    report, the secret and that process's name."""
    limits = replace(LIMITS, max_output_bytes=16 * MIB)  # all of the host's /proc, maybe
    with host_process_with_secrets() as (secret, name):
        result = asyncio.run(run_python(_WALK_PROC, limits))
    assert result.ok, result
    report = json.loads(result.stdout)
    # It runs as usual: it prints, imports the standard library, sees itself in /proc.
    own = str(report["pid"])
    assert report["self"] == own and "python" in report["seen"][own]["cmdline"]
    return result, report, secret, name


def assert_other_processes_hidden(
    result: SandboxResult, report: dict[str, Any], *found: str
) -> None:
    """Nothing of ``found`` nor the caller's own command line was read; the only other process
    it sees is its PID namespace's init."""
    assert not [text for text in found if text in result.stdout]
    with open("/proc/self/cmdline", "rb") as handle:
        ours = handle.read().decode("utf-8", "replace")
    seen = report["seen"]
    assert ours not in [entry["cmdline"] for entry in seen.values()]  # the caller, a trainer
    others = set(seen) - {str(report["pid"])}
    assert others <= {"1"}, sorted(others)
    if others:
        assert "# agentflow-sandbox-init" in seen["1"]["cmdline"]


def test_other_processes_command_lines_are_hidden() -> None:
    """Code walking /proc reads nothing of the host's processes: not a trainer's command line
    (``--api-key=...``), environment or name, nor ours."""
    if "processes" in support().not_isolated:
        # Where the machine refuses both a PID namespace and a hidepid /proc, results say so.
        result = asyncio.run(run_python("print(1)", LIMITS))
        assert result.ok and {"pid_namespace", "processes"} <= set(result.not_isolated)
        pytest.skip("this machine does not grant this layer (processes); the result says so")
    result, report, secret, name = walk_proc()
    assert_other_processes_hidden(result, report, secret, name)
    assert "processes" not in result.not_isolated
    if "pid_namespace" not in result.not_isolated:
        assert report["pid"] == 2  # under the namespace's init
