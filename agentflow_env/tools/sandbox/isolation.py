"""Low-level setup of one sandbox process: how it is launched and what it may do.

``_Plan`` says who the child runs as, its network and its process limit; ``_Plan.preexec``
builds the function the forked child runs before exec (C calls only, no imports: rlimits, a new
network namespace via libc ``unshare``, the uid switch, ``PR_SET_NO_NEW_PRIVS`` and
``PR_SET_PDEATHSIG``). The child gets a rebuilt environment (``_child_env``) and runs the user's
file through a small bootstrap (``_argv``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentflow_env.tools.sandbox.limits import SandboxLimits

_MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
_CODE_FILE = "main.py"  # the name the bootstrap below reads

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


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
