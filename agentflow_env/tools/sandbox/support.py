"""What isolation this machine grants: probed once per process, user and setting, then cached.

``sandbox_support()`` first finds the strongest run-as mode and an interpreter that works with
it, then adds the namespaces (network, IPC, mount, PID or else a ``hidepid`` /proc) one by one,
made as root or in a user namespace, and the seccomp filter, each kept only if a tiny program
still runs under it (and, for /proc, sees only what it should). What the kernel refuses is left
out and named in ``SandboxSupport.not_isolated`` (and in every result).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, replace

from agentflow_env.tools.sandbox.isolation import _MINIMAL_PATH, _child_env, _Plan
from agentflow_env.tools.sandbox.limits import SandboxError, SandboxLimits
from agentflow_env.tools.sandbox.namespaces import (
    HIDEPID,
    IPC,
    MNT,
    NET,
    PID,
    Namespaces,
    shared_dirs,
)
from agentflow_env.tools.sandbox.seccomp import compiled_filter
from agentflow_env.tools.sandbox.uids import _NOBODY, _UID_BASE, _UID_SLOTS, _current_user_tasks

#: Run-as modes, strongest first. "per-call uid" needs root; "shared uid" is the fallback when
#: the per-call uid range cannot be used (e.g. a user namespace mapping only 65536 ids).
PER_CALL_UID = "per-call uid"
SHARED_UID = "shared uid"
CURRENT_USER = "current user"

#: What a call sees of other processes (``SandboxSupport.pids``): a PID namespace of its own, or
#: (root only) the host's, through a /proc that shows only the processes of the call's uid.
PID_NAMESPACE = "namespace"
HIDEPID_PROC = "hidepid"

_PROBE_CODE = "import os, json, math; print('ok')"
_SECCOMP_CODE = """
import socket
try:
    socket.socket(socket.AF_UNIX)
except PermissionError:
    print('ok')
"""
# It runs as PID 2, under the namespace's init, and /proc/self is its own.
_PID_CODE = "import os\nprint('ok' if os.getpid() == 2 == int(os.readlink('/proc/self')) else '')"
# The host's init (pid 1, root) is hidden from it; /proc/self still works.
_HIDEPID_CODE = (
    "import os\n"
    "print('ok' if not os.path.exists('/proc/1') and os.readlink('/proc/self') == str(os.getpid())"
    " else '')"
)


@dataclass(frozen=True)
class SandboxSupport:
    """The isolation this machine grants, found by probing once per process and user.

    ``network``: "netns" (a network namespace made as root), "userns" (one made in a user
    namespace), "seccomp" (no namespace: IP sockets are refused instead) or ``None``.
    ``ipc``: an IPC namespace per call. ``private_dirs``: the world-writable directories each
    call gets a private tmpfs for. ``pids``: ``PID_NAMESPACE`` (a PID namespace and /proc of its
    own), ``HIDEPID_PROC`` (the host's PID namespace, through a /proc that hides the processes of
    other uids) or ``None`` (the host's /proc). ``seccomp``: the socket filter (``seccomp.py``)
    is loaded. ``userns``: the namespaces are made in a user namespace rather than as root.
    """

    interpreter: str
    run_as: str  # PER_CALL_UID, SHARED_UID or CURRENT_USER
    network: str | None
    ipc: bool = False
    private_dirs: tuple[str, ...] = ()
    pids: str | None = None
    seccomp: bool = False
    userns: bool = False

    @property
    def drops_privileges(self) -> bool:
        return self.run_as != CURRENT_USER

    @property
    def network_isolated(self) -> bool:
        return self.network is not None

    @property
    def not_isolated(self) -> tuple[str, ...]:
        """The layers a call does not get here: "uid" (it runs as the calling user),
        "pid_namespace" (it shares the host's PID namespace), "processes" (/proc shows the host's
        processes and their command lines), "network", "ipc" (System V and POSIX IPC are the
        host's), "tmp" (/tmp, /dev/shm & co are the host's) and "unix_sockets" (no seccomp
        filter: host unix sockets are reachable)."""
        missing = {
            "uid": self.run_as == CURRENT_USER,
            "pid_namespace": self.pids != PID_NAMESPACE,
            "processes": self.pids is None,
            "network": self.network is None,
            "ipc": not self.ipc,
            "tmp": not self.private_dirs,
            "unix_sockets": not self.seccomp,
        }
        return tuple(name for name, absent in missing.items() if absent)

    def _plan(self, uid: int | None, nproc: int) -> _Plan:
        """The set-up of one call running as ``uid``."""
        layers = {NET} if self.network in ("netns", "userns") else set()
        layers |= {IPC} if self.ipc else set()
        layers |= {MNT} if self.private_dirs else set()
        layers |= {PID} if self.pids == PID_NAMESPACE else set()
        layers |= {HIDEPID} if self.pids == HIDEPID_PROC else set()
        if self.pids == PID_NAMESPACE:
            # Its init runs as the call's uid, and so does the waiter outside unless it is root.
            nproc += 2 if self.userns or self.run_as == CURRENT_USER else 1
        namespaces = Namespaces(frozenset(layers), self.userns, self.private_dirs)
        seccomp = compiled_filter(allow_ip=self.network != "seccomp") if self.seccomp else None
        return _Plan(uid, uid, nproc, namespaces, seccomp)


_support_cache: dict[tuple[int, bool, bool], SandboxSupport] = {}
_support_lock = threading.Lock()


def _cache_key(limits: SandboxLimits) -> tuple[int, bool, bool]:
    # The user is part of the key: a process that switched uid must probe again.
    euid = os.geteuid() if hasattr(os, "geteuid") else 0
    return euid, limits.drop_privileges, limits.isolate_network


def sandbox_support(limits: SandboxLimits | None = None) -> SandboxSupport:
    """The strongest isolation that works here for ``limits``; probed once, then cached.

    Raises ``SandboxError`` when running as root with ``drop_privileges`` and no interpreter can
    run as an unprivileged uid: running untrusted code as root is refused (fail closed).
    """
    limits = limits or SandboxLimits()
    key = _cache_key(limits)
    with _support_lock:
        if key not in _support_cache:
            _support_cache[key] = _probe(limits.drop_privileges, limits.isolate_network)
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
    run_as, interpreter, uid, nproc = _run_as(is_root and drop_privileges, linux)
    base = SandboxSupport(interpreter, run_as, None)
    if not linux:
        return base
    # Namespaces: as root without a user namespace first, then in one; keep the way granting more.
    dirs = shared_dirs()
    wanted = ([NET] if isolate_network else []) + [IPC] + ([MNT] if dirs else []) + [PID]
    best = base
    for userns in [False, True] if is_root else [True]:
        granted = replace(base, userns=userns)
        for layer in wanted:
            for trial, code in _trials(granted, layer, dirs):
                if _probe_once(interpreter, trial._plan(uid, nproc), code):
                    granted = trial
                    break
        if len(granted.not_isolated) < len(best.not_isolated):
            best = granted
        if len(best.not_isolated) == len(_with_all(base, wanted, dirs).not_isolated):
            break
    # Seccomp: the socket filter; it also refuses IP sockets where no network namespace is had.
    network = "seccomp" if best.network is None and isolate_network else best.network
    trial = replace(best, network=network, seccomp=True)
    program = compiled_filter(allow_ip=network != "seccomp")
    if program is not None and _probe_once(interpreter, trial._plan(uid, nproc), _SECCOMP_CODE):
        best = trial
    return best


def _trials(
    support: SandboxSupport, layer: str, dirs: tuple[str, ...]
) -> list[tuple[SandboxSupport, str]]:
    """The ways to add ``layer``, best first, each with the program that shows it works."""
    if layer == NET:
        return [(replace(support, network="userns" if support.userns else "netns"), _PROBE_CODE)]
    if layer == IPC:
        return [(replace(support, ipc=True), _PROBE_CODE)]
    if layer == MNT:
        return [(replace(support, private_dirs=dirs), _PROBE_CODE)]
    return [
        (replace(support, pids=PID_NAMESPACE), _PID_CODE),
        (replace(support, pids=HIDEPID_PROC), _HIDEPID_CODE),
    ]


def _with_all(support: SandboxSupport, wanted: list[str], dirs: tuple[str, ...]) -> SandboxSupport:
    """``support`` with every wanted layer in its best form (what a full grant looks like)."""
    for layer in wanted:
        support = _trials(support, layer, dirs)[0][0]
    return support


def _run_as(drop_privileges: bool, linux: bool) -> tuple[str, str, int | None, int]:
    """The strongest run-as mode that works, with an interpreter that runs under it."""
    if drop_privileges:
        run_as_modes = [PER_CALL_UID, SHARED_UID] if linux else [SHARED_UID]
    else:
        run_as_modes = [CURRENT_USER]
    probe_uid = _UID_BASE + (os.getpid() % 2**22) * _UID_SLOTS + _UID_SLOTS - 1
    for run_as in run_as_modes:
        uid = {PER_CALL_UID: probe_uid, SHARED_UID: _NOBODY}.get(run_as)
        nproc = 64 + (_current_user_tasks() if run_as == CURRENT_USER else 0)
        for interpreter in _interpreter_candidates():
            if _probe_once(interpreter, _Plan(uid, uid, nproc)):
                return run_as, interpreter, uid, nproc
    if drop_privileges:
        raise SandboxError(
            "running as root and no Python interpreter can run as an unprivileged uid "
            f"(tried {_interpreter_candidates()}); make one readable by other users (e.g. a "
            "system python3 in /usr/bin) or pass SandboxLimits(drop_privileges=False) to run "
            "untrusted code as root at your own risk"
        )
    raise SandboxError(f"no usable Python interpreter among {_interpreter_candidates()}")


def _probe_once(interpreter: str, plan: _Plan, code: str = _PROBE_CODE) -> bool:
    workdir = tempfile.mkdtemp(prefix="agentflow-sandbox-probe-")
    try:
        if plan.uid is not None:
            os.chown(workdir, plan.uid, plan.gid or plan.uid)
        completed = subprocess.run(
            plan.command([interpreter, "-s", "-S", "-B", "-c", code]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=workdir,
            env=_child_env(workdir),
            start_new_session=True,
            preexec_fn=plan.preexec(SandboxLimits(), workdir),
            timeout=20,
            check=False,
        )
        return completed.returncode == 0 and completed.stdout.strip() == b"ok"
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


__all__ = [
    "CURRENT_USER",
    "HIDEPID_PROC",
    "PER_CALL_UID",
    "PID_NAMESPACE",
    "SHARED_UID",
    "SandboxSupport",
    "sandbox_support",
]
