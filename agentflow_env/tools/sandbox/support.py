"""What isolation this machine grants: probed once per process, user and setting, then cached.

``sandbox_support()`` first finds the strongest run-as mode and an interpreter that works with
it, then adds the namespaces (network, IPC, mount) one by one, made as root or in a user
namespace, and the seccomp filter, each kept only if a tiny program still runs under it. What the
kernel refuses is left out and named in ``SandboxSupport.not_isolated`` (and in every result).
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
from agentflow_env.tools.sandbox.namespaces import IPC, MNT, NET, Namespaces, shared_dirs
from agentflow_env.tools.sandbox.seccomp import compiled_filter
from agentflow_env.tools.sandbox.uids import _NOBODY, _UID_BASE, _UID_SLOTS, _current_user_tasks

#: Run-as modes, strongest first. "per-call uid" needs root; "shared uid" is the fallback when
#: the per-call uid range cannot be used (e.g. a user namespace mapping only 65536 ids).
PER_CALL_UID = "per-call uid"
SHARED_UID = "shared uid"
CURRENT_USER = "current user"

_PROBE_CODE = "import os, json, math; print('ok')"
_SECCOMP_CODE = """
import socket
try:
    socket.socket(socket.AF_UNIX)
except PermissionError:
    print('ok')
"""


@dataclass(frozen=True)
class SandboxSupport:
    """The isolation this machine grants, found by probing once per process and user.

    ``network``: "netns" (a network namespace made as root), "userns" (one made in a user
    namespace), "seccomp" (no namespace: IP sockets are refused instead) or ``None``.
    ``ipc``: an IPC namespace per call. ``private_dirs``: the world-writable directories each
    call gets a private tmpfs for. ``seccomp``: the socket filter (``seccomp.py``) is loaded.
    ``userns``: the namespaces are made in a user namespace rather than as root.
    """

    interpreter: str
    run_as: str  # PER_CALL_UID, SHARED_UID or CURRENT_USER
    network: str | None
    ipc: bool = False
    private_dirs: tuple[str, ...] = ()
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
        """The layers a call does not get here: "uid" (it runs as the calling user), "network",
        "ipc" (System V and POSIX IPC are the host's), "tmp" (/tmp, /dev/shm & co are the
        host's) and "unix_sockets" (no seccomp filter: host unix sockets are reachable)."""
        missing = {
            "uid": self.run_as == CURRENT_USER,
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
    wanted = ([NET] if isolate_network else []) + [IPC] + ([MNT] if dirs else [])
    best, best_count = base, 0
    for userns in [False, True] if is_root else [True]:
        granted, count = replace(base, userns=userns), 0
        for layer in wanted:
            trial = _with_layer(granted, layer, dirs)
            if _probe_once(interpreter, trial._plan(uid, nproc)):
                granted, count = trial, count + 1
        if count > best_count:
            best, best_count = granted, count
        if best_count == len(wanted):
            break
    # Seccomp: the socket filter; it also refuses IP sockets where no network namespace is had.
    network = "seccomp" if best.network is None and isolate_network else best.network
    trial = replace(best, network=network, seccomp=True)
    program = compiled_filter(allow_ip=network != "seccomp")
    if program is not None and _probe_once(interpreter, trial._plan(uid, nproc), _SECCOMP_CODE):
        best = trial
    return best


def _with_layer(support: SandboxSupport, layer: str, dirs: tuple[str, ...]) -> SandboxSupport:
    if layer == NET:
        return replace(support, network="userns" if support.userns else "netns")
    if layer == IPC:
        return replace(support, ipc=True)
    return replace(support, private_dirs=dirs)


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
            [interpreter, "-s", "-S", "-B", "-c", code],
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


__all__ = ["CURRENT_USER", "PER_CALL_UID", "SHARED_UID", "SandboxSupport", "sandbox_support"]
