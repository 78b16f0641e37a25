"""The Linux namespaces one sandbox child gets: network, IPC, mount and PID.

- ``NET``: a new network namespace with only a loopback that is down (no IP network, and no
  abstract unix sockets, which belong to a network namespace).
- ``IPC``: System V shared memory, semaphores, message queues and POSIX message queues made by
  the call live in its own IPC namespace and are destroyed with it when the call ends.
- ``MNT``: a mount namespace in which every world-writable directory (``/tmp``, ``/var/tmp``,
  ``/dev/shm``, ``/run/lock``, ``/dev/mqueue``) is a fresh, size-capped tmpfs, so nothing written
  there reaches the host or outlives the call. The call's working directory (usually under
  ``/tmp``) is bind-mounted back at its own path.
- ``PID``: a PID namespace with a ``/proc`` of its own, so that the code sees only its own
  processes, never the command lines of the host's (a trainer's ``--api-key=...``). The code
  runs as PID 2 under a small init (``_INIT``; ``_fork_into_pid_namespace``).
- ``HIDEPID``: where no PID namespace is granted (root only), a ``/proc`` mounted with
  ``hidepid=invisible``, which shows only the processes of the call's own uid.

As root they are made before the switch to the sandbox uid. Without root they are made inside a
new user namespace that maps only the child's own uid and gid: after exec the code holds no
capability there, so it cannot undo the mounts. Privileged or not, the kernel frees the
namespaces, with everything in them, when their last process is gone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import textwrap
import warnings
from dataclasses import dataclass
from typing import NoReturn

from agentflow_env.tools.sandbox.syscalls import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    mount,
    prctl,
    unshare,
    write_proc_self,
)

NET = "net"
IPC = "ipc"
MNT = "mnt"
PID = "pid"
HIDEPID = "hidepid"
LAYERS = (NET, IPC, MNT, PID, HIDEPID)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWPID = 0x20000000
_CLONE_FLAGS = {
    NET: 0x40000000,
    IPC: 0x08000000,
    MNT: _CLONE_NEWNS,
    PID: _CLONE_NEWPID | _CLONE_NEWNS,  # the new /proc must not show on the host
    HIDEPID: _CLONE_NEWNS,
}
_CLONE_NEWUSER = 0x10000000
_SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
_TMPFS_INODES = 16384
_PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
# "invisible" is known only to kernels that give each mount of /proc its own options (5.8+). An
# older one shares them with the host's /proc, which hidepid must not change: it refuses this.
_HIDEPID_OPTIONS = b"hidepid=invisible"

# PID 1 of a call's PID namespace: runs the code's command line (its arguments) as PID 2, reaps
# orphans, and reports PID 2's wait status on fd 0, a pipe to the waiter outside. A new
# interpreter, not a copy of the caller: nothing of the caller's memory is in the namespace.
# Stdlib only, for any python3 the sandbox may use.
_INIT = textwrap.dedent(
    """\
    # agentflow-sandbox-init
    import os, sys
    code = os.fork()
    if code == 0:
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        os.execv(sys.argv[1], sys.argv[1:])
    os.close(1)
    os.close(2)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except KeyboardInterrupt:  # SIGINT, which the code may send: init's only handler
            continue
        if pid == code:
            os.write(0, str(status).encode())
            break
    """
)


def shared_dirs() -> tuple[str, ...]:
    """The world-writable directories on this machine (real paths, no links)."""
    found = []
    for path in _SHARED_DIRS:
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                found.append(os.path.realpath(path))
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Namespaces:
    """Which namespaces a child gets and how they are made. Methods run in the forked child."""

    layers: frozenset[str] = frozenset()
    userns: bool = False  # made inside a new user namespace (no root needed)
    private_dirs: tuple[str, ...] = ()  # with MNT: the directories replaced by a tmpfs

    @property
    def pid_namespace(self) -> bool:
        return PID in self.layers

    def command(self, argv: list[str]) -> list[str]:
        """What the child execs: ``argv``, or with a PID namespace the init that runs it."""
        if PID not in self.layers:
            return argv
        return [argv[0], "-s", "-S", "-B", "-c", _INIT, *argv]

    def check_waiter(self) -> None:
        """Once the parent-death signal is set: with a PID namespace, fail if the waiter outside
        died before (its signal would never come)."""
        if PID in self.layers:
            poller = select.poll()
            poller.register(0, select.POLLOUT)
            if any(events & select.POLLERR for _, events in poller.poll(0)):
                raise ProcessLookupError("the waiter outside the PID namespace is gone")

    def _flags(self) -> int:
        flags = 0
        for layer in self.layers:
            flags |= _CLONE_FLAGS[layer]
        return flags

    def enter_as_root(self, workdir: str, tmpfs_bytes: int) -> None:
        """Before the uid switch: as root, no user namespace is needed."""
        if self.layers and not self.userns:
            unshare(self._flags())
            self._mount(workdir, tmpfs_bytes)

    def enter_unprivileged(self, workdir: str, tmpfs_bytes: int) -> None:
        """After the uid switch: a user namespace mapping only the current uid and gid."""
        if not (self.layers and self.userns):
            return
        uid, gid = os.getuid(), os.getgid()
        unshare(_CLONE_NEWUSER | self._flags())
        prctl(PR_SET_DUMPABLE, 1)  # a uid switch made /proc/self root's; the maps need it ours
        write_proc_self("setgroups", "deny")
        write_proc_self("uid_map", f"{uid} {uid} 1")
        write_proc_self("gid_map", f"{gid} {gid} 1")
        self._mount(workdir, tmpfs_bytes)

    def _mount(self, workdir: str, tmpfs_bytes: int) -> None:
        """The mounts, made by the process that goes on to exec (with PID: the new init)."""
        if not self._flags() & _CLONE_NEWNS:
            return
        workdir = os.path.realpath(workdir)
        # Nothing mounted here may propagate back to the host's mount namespace.
        mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
        if MNT in self.layers:
            self._mount_private_dirs(workdir, tmpfs_bytes)
        if PID in self.layers:
            _fork_into_pid_namespace()
            # A /proc of the new namespace: only a process inside it can mount one.
            mount(b"proc", b"/proc", b"proc", _PROC_FLAGS, None)
        elif HIDEPID in self.layers:
            mount(b"proc", b"/proc", b"proc", _PROC_FLAGS, _HIDEPID_OPTIONS)

    def _mount_private_dirs(self, workdir: str, tmpfs_bytes: int) -> None:
        os.chdir(workdir)  # "." below: the directory the tmpfs is about to hide
        options = f"mode=1777,size={tmpfs_bytes},nr_inodes={_TMPFS_INODES}".encode()
        for directory in self.private_dirs:
            mount(b"tmpfs", directory.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options)
        for directory in self.private_dirs:
            if workdir.startswith(directory.rstrip("/") + "/"):
                path = directory
                for part in workdir[len(directory) :].strip("/").split("/"):
                    path = os.path.join(path, part)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(path)
                    os.chmod(path, 0o755)  # the sandbox uid must be able to walk down to it
                mount(b".", workdir.encode(), None, MS_BIND, None)
                break
        os.chdir(workdir)  # into the bind mount: ".." is now the private tmpfs


def _fork_into_pid_namespace() -> None:
    """After ``unshare(CLONE_NEWPID)``, which moves only later children: fork once.

    Returns in the child, PID 1 of the new namespace, which goes on to exec ``_INIT``; its fd 0
    becomes the pipe for the code's wait status (the code's stdin is /dev/null again). PID 1 is
    the namespace's init: it ignores the signals it has no handler for, and its end kills
    everything in the namespace. The code runs as PID 2 so that it behaves as usual (SIGXCPU and
    its own signals reach it, orphans are reaped). The parent, the process the caller started,
    stays outside: it waits for init and ends as the code's process ended, so exit codes and
    signals read as before; killing it kills init (parent-death signal), hence the namespace.
    """
    status_r, status_w = os.pipe()
    parent = os.getppid()
    # Listed now: once the new /proc is mounted, the waiter outside has no /proc/self.
    fds = [int(name) for name in os.listdir("/proc/self/fd")]
    with warnings.catch_warnings():  # 3.12+ warns about fork() with threads; there is one here
        warnings.simplefilter("ignore", DeprecationWarning)
        init = os.fork()
    if init:
        _wait_outside(init, parent, fds, status_r, status_w)
    os.close(status_r)
    os.dup2(status_w, 0)
    os.close(status_w)


def _wait_outside(init: int, parent: int, fds: list[int], status_r: int, status_w: int) -> NoReturn:
    """Wait for init, then end as the code did (or as init did, if it could not tell)."""
    try:
        os.close(status_w)
        # No descriptor but the pipe: the caller's pipes would stay open, and the start of the
        # code would seem to hang until it ended. No signal but SIGKILL; death with the caller.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for fd in fds:
            if fd != status_r:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if os.getppid() == parent:  # else the caller is gone already: init goes too
            _, status = os.waitpid(init, 0)
            report = os.read(status_r, 32)  # the code may have written there too: its loss
            _end_like(int(report) if report.isdigit() else status)
        os.kill(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(255)


def _end_like(status: int) -> None:
    """Exit as a process with wait ``status`` did: with its code, or killed by its signal."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        os._exit(code)
    prctl(PR_SET_DUMPABLE, 0)  # no core dump of this copy of the caller
    with contextlib.suppress(ValueError, OSError):
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})


__all__ = ["HIDEPID", "IPC", "LAYERS", "MNT", "NET", "PID", "Namespaces", "shared_dirs"]
