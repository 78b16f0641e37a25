"""Low-level setup of one sandbox process: how it is launched and what it may do.

``_Plan`` says who the child runs as, its namespaces, its seccomp filter and its process limit;
``_Plan.preexec`` builds the function the forked child runs before exec: rlimits, namespaces
(``namespaces``), the uid switch, ``PR_SET_NO_NEW_PRIVS``, ``PR_SET_PDEATHSIG`` and the seccomp
filter (``seccomp``). The child gets a rebuilt environment (``_child_env``) and runs the user's
file through a small bootstrap (``_argv``), under a small init where it has a PID namespace
(``_Plan.command``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

from agentflow_env.tools.sandbox.limits import SandboxLimits
from agentflow_env.tools.sandbox.namespaces import Namespaces
from agentflow_env.tools.sandbox.seccomp import SeccompProgram
from agentflow_env.tools.sandbox.syscalls import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl

_MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
_CODE_FILE = "main.py"  # the name the bootstrap below reads


@dataclass(frozen=True)
class _Plan:
    """How one child is set up: who it runs as, its namespaces and filter, its process limit."""

    uid: int | None
    gid: int | None
    nproc: int
    namespaces: Namespaces = field(default_factory=Namespaces)
    seccomp: SeccompProgram | None = None

    def preexec(
        self, limits: SandboxLimits, workdir: str, report_fd: int | None = None
    ) -> Callable[[], None]:
        """The function the forked child runs before exec (it must not allocate much).

        If a step fails, its name and the error are written to ``report_fd`` (subprocess itself
        only says "Exception occurred in preexec_fn").
        """
        cpu = max(1, int(limits.cpu_s))
        rlimits = [
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
            (resource.RLIMIT_NPROC, self.nproc, self.nproc),
            (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, then SIGKILL
        ]
        rlimits = [(which, *_within_hard_limit(which, soft, hard)) for which, soft, hard in rlimits]
        uid, gid, namespaces, seccomp = self.uid, self.gid, self.namespaces, self.seccomp
        memory = _within_hard_limit(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes)
        # The child holds every descriptor of the parent until exec closes them (close_fds), and
        # the setup below opens files (/proc/self/*): the descriptor limit comes last.
        files = _within_hard_limit(
            resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files
        )
        tmpfs_bytes = limits.tmpfs_bytes
        linux = sys.platform.startswith("linux")

        def preexec() -> None:
            step = "rlimits"
            try:
                os.umask(0o077)
                for which, soft, hard in rlimits:
                    resource.setrlimit(which, (soft, hard))
                step = "namespaces (as root)"
                namespaces.enter_as_root(workdir, tmpfs_bytes)
                if uid is not None and gid is not None:
                    step = "uid switch"
                    os.setgroups([])
                    os.setgid(gid)
                    os.setuid(uid)
                step = "namespaces (user namespace)"
                namespaces.enter_unprivileged(workdir, tmpfs_bytes)
                if linux:
                    step = "prctl"
                    prctl(PR_SET_NO_NEW_PRIVS, 1)
                    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid switch, which clears it
                    namespaces.check_waiter()
                if seccomp is not None:
                    step = "seccomp filter"
                    seccomp.load()
                # Last: until exec the child still has the (possibly large) parent's memory
                # and descriptors.
                step = "memory and descriptor limits"
                resource.setrlimit(resource.RLIMIT_AS, memory)
                resource.setrlimit(resource.RLIMIT_NOFILE, files)
            except BaseException as exc:
                if report_fd is not None:
                    with contextlib.suppress(OSError):
                        os.write(report_fd, f"{step}: {type(exc).__name__}: {exc}".encode()[:400])
                raise

        return preexec

    def command(self, argv: list[str]) -> list[str]:
        """The command line the child execs for ``argv`` (with a PID namespace: its init)."""
        return self.namespaces.command(argv)


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
