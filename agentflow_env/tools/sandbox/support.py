"""What isolation this machine grants: probed once per process and setting, then cached.

``sandbox_support()`` tries the run-as modes and network layers strongest first, each with every
candidate interpreter, by running a tiny program under that ``_Plan``; the first that works is
the ``SandboxSupport`` every later call uses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from agentflow_env.tools.sandbox.isolation import _MINIMAL_PATH, _child_env, _Plan
from agentflow_env.tools.sandbox.limits import SandboxError, SandboxLimits
from agentflow_env.tools.sandbox.uids import _NOBODY, _UID_BASE, _UID_SLOTS, _current_user_tasks

#: Run-as modes, strongest first. "per-call uid" needs root; "shared uid" is the fallback when
#: the per-call uid range cannot be used (e.g. a user namespace mapping only 65536 ids).
PER_CALL_UID = "per-call uid"
SHARED_UID = "shared uid"
CURRENT_USER = "current user"


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


__all__ = ["CURRENT_USER", "PER_CALL_UID", "SHARED_UID", "SandboxSupport", "sandbox_support"]
