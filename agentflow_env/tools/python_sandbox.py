"""Run untrusted Python in a fresh, limited, unprivileged process; and the ``Python`` tool.

Every call gets a new interpreter in a new temporary directory, with a scrubbed environment,
stdin closed, its own session, rlimits (CPU, address space, processes, file size, open files, no
core dumps) and, where the OS allows it, no network (a new network namespace) and its own
unprivileged uid. Running as root, each call runs as a uid of its own, so that ``RLIMIT_NPROC``
applies (it never applies to root), the child can neither signal nor inspect the parent, and
every process the call left behind is killed by uid when it ends. ``docs/sandbox.md`` lists what
is and is not isolated.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult

if TYPE_CHECKING:
    from agentflow_env.tools.e2b_sandbox import E2BSandbox

KIB = 1024
MIB = 1024 * KIB

#: Run-as modes, strongest first. "per-call uid" needs root; "shared uid" is the fallback when
#: the per-call uid range cannot be used (e.g. a user namespace mapping only 65536 ids).
PER_CALL_UID = "per-call uid"
SHARED_UID = "shared uid"
CURRENT_USER = "current user"

KILLED_TIMEOUT = "timeout"
KILLED_OUTPUT = "output_limit"
KILLED_CPU = "cpu_limit"

_MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
_CODE_FILE = "main.py"
_UID_BASE = 1_000_000_000  # + (pid mod 2**22) * 256 + slot: below 2**31, unique per live parent
_UID_SLOTS = 256
_NOBODY = 65534
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_STDERR_TAIL_CHARS = 2000
_DRAIN_GRACE_S = 2.0

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


class SandboxError(RuntimeError):
    """The sandbox itself could not run (not the code in it)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one call. CPU seconds, address space and file size hold per process.

    ``max_processes`` counts processes and threads of the sandbox's uid (``RLIMIT_NPROC``).
    ``isolate_network`` and ``drop_privileges`` ask for those layers where the OS allows them;
    ``sandbox_support()`` says what was granted.
    """

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 512 * MIB
    max_processes: int = 32
    max_output_bytes: int = 64 * KIB
    max_file_bytes: int = 16 * MIB
    max_open_files: int = 64
    isolate_network: bool = True
    drop_privileges: bool = True

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_bytes", "max_processes", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        if self.max_open_files < 16:
            raise ValueError("SandboxLimits.max_open_files must be at least 16")


@dataclass
class SandboxResult:
    """What one execution produced. ``exit_code`` < 0 means killed by that signal."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    killed_reason: str | None = None
    output_truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated


@dataclass(frozen=True)
class SandboxSupport:
    """The isolation this machine grants, found by probing once per process."""

    interpreter: str
    run_as: str  # PER_CALL_UID, SHARED_UID or CURRENT_USER
    network: str | None  # "netns" (as root), "userns" (unprivileged namespace) or None

    @property
    def drops_privileges(self) -> bool:
        return self.run_as != CURRENT_USER

    @property
    def network_isolated(self) -> bool:
        return self.network is not None


# --------------------------------------------------------------------------------------------
# Failure descriptions


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


# --------------------------------------------------------------------------------------------
# Low-level process setup (runs in the forked child before exec: C calls only, no imports)


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


_unshare = _libc_function("unshare") if sys.platform.startswith("linux") else None
_prctl = _libc_function("prctl") if sys.platform.startswith("linux") else None
if _prctl is not None:
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _checked_unshare(flags: int) -> None:
    if _unshare is None or _unshare(flags) != 0:
        errno = ctypes.get_errno() if _unshare is not None else 38
        raise OSError(errno, f"unshare({flags:#x}) failed")


@dataclass(frozen=True)
class _Plan:
    """How one child is set up: who it runs as, its network, its rlimits."""

    uid: int | None
    gid: int | None
    network: str | None
    nproc: int

    def preexec(self, limits: SandboxLimits) -> Callable[[], None]:
        """The function the forked child runs before exec (it must not allocate much)."""
        cpu = max(1, int(limits.cpu_s))
        rlimits = [
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
            (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
            (resource.RLIMIT_NPROC, self.nproc, self.nproc),
            (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, then SIGKILL
        ]
        rlimits = [(which, *_within_hard_limit(which, soft, hard)) for which, soft, hard in rlimits]
        uid, gid, network = self.uid, self.gid, self.network
        memory = _within_hard_limit(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes)

        def preexec() -> None:
            os.umask(0o077)
            for which, soft, hard in rlimits:
                resource.setrlimit(which, (soft, hard))
            if network == "netns":
                _checked_unshare(_CLONE_NEWNET)
            if uid is not None and gid is not None:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            if network == "userns":
                _checked_unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
            if _prctl is not None:
                _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # Last: until exec the child still has the (possibly large) parent's address space.
            resource.setrlimit(resource.RLIMIT_AS, memory)

        return preexec


def _within_hard_limit(which: int, soft: int, hard: int) -> tuple[int, int]:
    """Only root may raise a hard limit: clamp to the current one otherwise."""
    if os.geteuid() == 0:
        return soft, hard
    current = resource.getrlimit(which)[1]
    if current == resource.RLIM_INFINITY:
        return soft, hard
    return min(soft, current), min(hard, current)


def _child_env(workdir: str) -> dict[str, str]:
    """The whole environment of the child: nothing is inherited from the parent."""
    return {
        "PATH": _MINIMAL_PATH,
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


# Runs the user's file as __main__; a trailing expression is echoed like a REPL (and like E2B's
# Jupyter kernel); tracebacks start at the user's code.
_BOOTSTRAP = textwrap.dedent(
    """
    def _agentflow_run():
        import ast, sys
        with open("main.py", encoding="utf-8") as handle:
            source = handle.read()
        namespace = sys.modules["__main__"].__dict__
        namespace.pop("_agentflow_run", None)
        namespace["__file__"] = "main.py"
        try:
            tree = ast.parse(source, "main.py")
            tail = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                tail = ast.Expression(tree.body.pop().value)
            exec(compile(tree, "main.py", "exec"), namespace)
            if tail is not None:
                value = eval(compile(tail, "main.py", "eval"), namespace)
                if value is not None:
                    print(repr(value))
        except SystemExit:
            raise
        except BaseException as error:
            import traceback
            frames = error.__traceback__
            while frames is not None and frames.tb_frame.f_code.co_filename != "main.py":
                frames = frames.tb_next
            traceback.print_exception(type(error), error, frames)
            sys.exit(1)
    _agentflow_run()
    """
)


def _argv(interpreter: str) -> list[str]:
    # -s -S: no site-packages (stdlib only); -B: no .pyc; -u: unbuffered, so output printed
    # before a timeout is kept. Not -I/-E: the environment is ours (PYTHONHASHSEED=0 matters).
    return [interpreter, "-s", "-S", "-B", "-u", "-X", "utf8", "-c", _BOOTSTRAP]


# --------------------------------------------------------------------------------------------
# Probing what this machine allows (once per process and setting)

_support_cache: dict[tuple[bool, bool], SandboxSupport] = {}
_support_lock = threading.Lock()


def sandbox_support(limits: SandboxLimits | None = None) -> SandboxSupport:
    """The strongest isolation that works here for ``limits``; probed once, then cached.

    Raises ``SandboxError`` when running as root with ``drop_privileges`` and no interpreter can
    run as an unprivileged uid: running untrusted code as root is refused (fail closed).
    """
    limits = limits or SandboxLimits()
    key = (limits.drop_privileges, limits.isolate_network)
    with _support_lock:
        if key not in _support_cache:
            _support_cache[key] = _probe(*key)
        return _support_cache[key]


def _interpreter_candidates() -> list[str]:
    found = [
        sys.executable,
        os.path.realpath(sys.executable),
        getattr(sys, "_base_executable", ""),
        shutil.which("python3", path=_MINIMAL_PATH) or "",
        shutil.which(f"python{sys.version_info[0]}.{sys.version_info[1]}", path=_MINIMAL_PATH)
        or "",
    ]
    return list(dict.fromkeys(path for path in found if path))


def _probe(drop_privileges: bool, isolate_network: bool) -> SandboxSupport:
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    linux = sys.platform.startswith("linux")
    if is_root and drop_privileges:
        run_as_modes = [PER_CALL_UID, SHARED_UID] if linux else [SHARED_UID]
    else:
        run_as_modes = [CURRENT_USER]
    networks: list[str | None] = []
    if isolate_network and linux:
        networks = ["netns", "userns"] if is_root else ["userns"]
    networks.append(None)
    probe_uid = _UID_BASE + (os.getpid() % 2**22) * _UID_SLOTS + _UID_SLOTS - 1
    for run_as in run_as_modes:
        uid = {PER_CALL_UID: probe_uid, SHARED_UID: _NOBODY}.get(run_as)
        nproc = 64 + (_current_user_tasks() if run_as == CURRENT_USER else 0)
        for network in networks:
            for interpreter in _interpreter_candidates():
                if _probe_once(interpreter, _Plan(uid, uid, network, nproc)):
                    return SandboxSupport(interpreter, run_as, network)
    if is_root and drop_privileges:
        raise SandboxError(
            "running as root and no Python interpreter can run as an unprivileged uid "
            f"(tried {_interpreter_candidates()}); make one readable by other users (e.g. a "
            "system python3 in /usr/bin) or pass SandboxLimits(drop_privileges=False) to run "
            "untrusted code as root at your own risk"
        )
    raise SandboxError(f"no usable Python interpreter among {_interpreter_candidates()}")


def _probe_once(interpreter: str, plan: _Plan) -> bool:
    workdir = tempfile.mkdtemp(prefix="agentflow-sandbox-probe-")
    try:
        if plan.uid is not None:
            os.chown(workdir, plan.uid, plan.gid or plan.uid)
        completed = subprocess.run(
            [interpreter, "-s", "-S", "-B", "-c", "import os, json, math; print('ok')"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=workdir,
            env=_child_env(workdir),
            start_new_session=True,
            preexec_fn=plan.preexec(SandboxLimits()),
            timeout=20,
            check=False,
        )
        return completed.returncode == 0 and completed.stdout.strip() == b"ok"
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Per-call uids (root only)


def _uid_processes(uid: int) -> list[int]:
    """Pids whose /proc entry belongs to ``uid`` (zombies included)."""
    pids = []
    with contextlib.suppress(OSError), os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        pids.append(int(entry.name))
    return pids


class _UidPool:
    """Hands out uids of this parent's range round-robin, skipping ones with live processes.

    Killed processes can stay zombies for a while (counted by ``RLIMIT_NPROC``) until init
    reaps them, so a uid with any process left is not handed out again until it has none.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner_pid = -1
        self._busy: set[int] = set()
        self._unchecked: set[int] = set()
        self._next = 0

    def try_acquire(self) -> int | None:
        with self._lock:
            if self._owner_pid != os.getpid():  # a new process (or a fork): start over
                self._owner_pid = os.getpid()
                self._busy.clear()
                self._unchecked = set(range(_UID_SLOTS))
                self._next = 0
            base = _UID_BASE + (self._owner_pid % 2**22) * _UID_SLOTS
            for step in range(_UID_SLOTS):
                slot = (self._next + step) % _UID_SLOTS
                if slot in self._busy:
                    continue
                if slot in self._unchecked:
                    if _uid_processes(base + slot) and not _sweep_uid(base + slot):
                        continue
                    self._unchecked.discard(slot)
                self._busy.add(slot)
                self._next = slot + 1
                return base + slot
            return None

    def release(self, uid: int, leftovers: bool) -> None:
        with self._lock:
            slot = (uid - _UID_BASE) % _UID_SLOTS
            self._busy.discard(slot)
            if leftovers:
                self._unchecked.add(slot)


_uid_pool = _UidPool()


async def _acquire_uid(deadline: float) -> int:
    while True:
        uid = _uid_pool.try_acquire()
        if uid is not None:
            return uid
        if time.monotonic() > deadline:
            raise SandboxError(f"all {_UID_SLOTS} sandbox uids are busy")
        await asyncio.sleep(0.02)


def sandbox_uid_range() -> range:
    """The uids this process's sandboxes run as (with per-call uids, i.e. as root)."""
    base = _UID_BASE + (os.getpid() % 2**22) * _UID_SLOTS
    return range(base, base + _UID_SLOTS)


def _kill_uid_preexec(uid: int) -> Callable[[], None]:
    def preexec() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        # kill(-1) as that uid reaches exactly its processes (never the caller); a fork racing
        # with it is killed too.
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)

    return preexec


async def _kill_uid(uid: int) -> bool:
    """SIGKILL every process of ``uid``; ``False`` if the helper could not run."""
    true_binary = shutil.which("true", path=_MINIMAL_PATH)
    if true_binary is None:
        return False
    try:
        helper = await asyncio.create_subprocess_exec(
            true_binary,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            preexec_fn=_kill_uid_preexec(uid),
        )
        await helper.wait()
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _remove_files_of(uid: int) -> None:
    """Remove what ``uid`` left at the top of world-writable directories (/tmp, /dev/shm...)."""
    for directory in _WORLD_WRITABLE:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


def _current_user_tasks() -> int:
    """Processes and threads of the current user (``RLIMIT_NPROC`` counts them all)."""
    uid = os.getuid()
    total = 0
    for pid in _uid_processes(uid):
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/task"))
    return total


# --------------------------------------------------------------------------------------------
# Running one call


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
    key = (limits.drop_privileges, limits.isolate_network)
    support = _support_cache.get(key)
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
    plan = _Plan(uid, uid, support.network, nproc)
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
    return result


def _release_uid(uid: int) -> None:
    """Remove the uid's files in /tmp & co and hand it back; a uid with processes left (zombies
    not yet reaped by init, or survivors of an interrupted cleanup) is re-checked before reuse."""
    _remove_files_of(uid)
    _uid_pool.release(uid, leftovers=bool(_uid_processes(uid)) and not _sweep_uid(uid))


def _sweep_uid(uid: int) -> bool:
    """Kill what is left of ``uid`` (blocking, a few ms); ``True`` if nothing is left at all.

    Left are usually zombies of killed processes, waiting for init; or processes of a call whose
    cleanup was interrupted, or of an earlier parent process with the same pid (and uid range).
    """
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [shutil.which("true", path=_MINIMAL_PATH) or "/bin/true"],
            env={},
            preexec_fn=_kill_uid_preexec(uid),
            timeout=5,
            check=False,
        )
    return not _uid_processes(uid)


async def _execute(
    interpreter: str, plan: _Plan, workdir: str, limits: SandboxLimits
) -> SandboxResult:
    loop = asyncio.get_running_loop()
    try:
        transport, collector = await loop.subprocess_exec(
            lambda: _Collector(limits.max_output_bytes),
            *_argv(interpreter),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_child_env(workdir),
            start_new_session=True,
            close_fds=True,
            preexec_fn=plan.preexec(limits),
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SandboxError(f"the sandbox process could not start: {error}") from error
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
    """Kill everything the call started: by uid where it has its own, else by process group."""
    if plan.uid is not None and plan.uid != _NOBODY and await _kill_uid(plan.uid):
        return
    pid = transport.get_pid()
    if transport.get_returncode() is None or plan.uid is None or plan.uid == _NOBODY:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


# --------------------------------------------------------------------------------------------
# The tool

_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)(?:```|\Z)", re.S | re.I)


def extract_code(text: str) -> str:
    """The code in ``text``: the ```python fenced blocks joined, or the text itself."""
    blocks = [block.strip("\n") for block in _FENCED.findall(text)]
    if blocks:
        return "\n".join(textwrap.dedent(block) for block in blocks).strip("\n") + "\n"
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        stripped = stripped[3:-3]
    return textwrap.dedent(stripped.strip("\n")).strip("\n") + "\n"


def result_to_tool_result(result: SandboxResult, limits: SandboxLimits, **meta: Any) -> ToolResult:
    """The observation for the planner: stdout, plus a stderr tail and a reason on failure."""
    metadata = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "killed_reason": result.killed_reason,
        "output_truncated": result.output_truncated,
        "duration_s": result.duration_s,
        **meta,
    }
    error = describe_failure(result, limits, local=meta.get("backend", "local") == "local")
    if error is None:
        output = result.stdout if result.stdout.strip() else "(no output: print() what you need)"
        return ToolResult(ok=True, output=output, metadata=metadata)
    output = result.stdout
    stderr = result.stderr.strip()
    if stderr:
        tail = stderr[-_STDERR_TAIL_CHARS:]
        output = f"{output.rstrip()}\n[stderr]\n{tail}".lstrip("\n")
    return ToolResult(ok=False, output=output, error=error, metadata=metadata)


class PythonTool(Tool):
    """Runs planner-written Python in a sandbox: ``backend="local"`` (a limited subprocess) or
    ``"e2b"`` (an E2B cloud sandbox; needs the ``e2b`` extra and ``E2B_API_KEY``)."""

    card = ToolCard(
        name="Python",
        description=(
            "Runs a short Python 3 program (standard library only) and returns what it prints. "
            "A trailing expression is printed like in a REPL. Use it for exact arithmetic, "
            "dates, counting and small algorithms."
        ),
        input_schema={
            "code": {
                "type": "string",
                "description": "the Python code to run; print() the values you need",
                "required": True,
            },
        },
        output_type="the program's standard output, or the error and the end of its traceback",
        primary_argument="code",
        demo_commands=(
            {"command": 'Python(code="print(sum(range(1, 101)))")', "description": "a sum"},
            {
                "command": 'Python(code="import datetime\\nprint(datetime.date(2024, 3, 1).weekday())")',
                "description": "a weekday",
            },
        ),
        limitations=(
            "no network access and no third-party packages",
            "each call is a fresh process: variables do not persist between calls",
            "limited time, memory and output",
        ),
    )

    def __init__(
        self,
        backend: str = "local",
        limits: SandboxLimits | None = None,
        *,
        e2b: E2BSandbox | None = None,
    ) -> None:
        if backend not in ("local", "e2b"):
            raise ValueError(f"unknown Python backend {backend!r}; use 'local' or 'e2b'")
        self.backend = backend
        self.limits = limits or SandboxLimits()
        self._e2b = e2b
        if backend == "e2b" and e2b is None:
            from agentflow_env.tools.e2b_sandbox import E2BSandbox

            self._e2b = E2BSandbox(limits=self.limits)
        # Longer than the sandbox's own limit, so the sandbox reports (and cleans up) first.
        self.timeout_s = self.limits.timeout_s + (3.0 if backend == "local" else 30.0)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        code = extract_code(str(arguments["code"]))
        if not code.strip():
            return ToolResult.failure("Python: no code to run")
        try:
            if self._e2b is not None:
                result = await self._e2b.run(code)
            else:
                result = await run_python(code, self.limits)
        except SandboxError as error:
            return ToolResult.failure(f"Python sandbox unavailable: {error}", kind="sandbox")
        return result_to_tool_result(result, self.limits, backend=self.backend)


__all__ = [
    "PythonTool",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSupport",
    "describe_failure",
    "extract_code",
    "result_to_tool_result",
    "run_python",
    "sandbox_support",
    "sandbox_uid_range",
]
