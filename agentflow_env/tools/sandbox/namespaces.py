"""The Linux namespaces one sandbox child gets: network, IPC and mount.

- ``NET``: a new network namespace with only a loopback that is down (no IP network, and no
  abstract unix sockets, which belong to a network namespace).
- ``IPC``: System V shared memory, semaphores, message queues and POSIX message queues made by
  the call live in its own IPC namespace and are destroyed with it when the call ends.
- ``MNT``: a mount namespace in which every world-writable directory (``/tmp``, ``/var/tmp``,
  ``/dev/shm``, ``/run/lock``, ``/dev/mqueue``) is a fresh, size-capped tmpfs, so nothing written
  there reaches the host or outlives the call. The call's working directory (usually under
  ``/tmp``) is bind-mounted back at its own path.

As root they are made before the switch to the sandbox uid. Without root they are made inside a
new user namespace that maps only the child's own uid and gid: after exec the code holds no
capability there, so it cannot undo the mounts. Privileged or not, the kernel frees the
namespaces, with everything in them, when their last process is gone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from agentflow_env.tools.sandbox.syscalls import (
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_DUMPABLE,
    mount,
    prctl,
    unshare,
    write_proc_self,
)

NET = "net"
IPC = "ipc"
MNT = "mnt"
LAYERS = (NET, IPC, MNT)

_CLONE_FLAGS = {NET: 0x40000000, IPC: 0x08000000, MNT: 0x00020000}
_CLONE_NEWUSER = 0x10000000
_SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
_TMPFS_INODES = 16384


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

    def _flags(self) -> int:
        flags = 0
        for layer in self.layers:
            flags |= _CLONE_FLAGS[layer]
        return flags

    def enter_as_root(self, workdir: str, tmpfs_bytes: int) -> None:
        """Before the uid switch: as root, no user namespace is needed."""
        if self.layers and not self.userns:
            unshare(self._flags())
            self._mount_private_dirs(workdir, tmpfs_bytes)

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
        self._mount_private_dirs(workdir, tmpfs_bytes)

    def _mount_private_dirs(self, workdir: str, tmpfs_bytes: int) -> None:
        if MNT not in self.layers:
            return
        workdir = os.path.realpath(workdir)
        os.chdir(workdir)  # "." below: the directory the tmpfs is about to hide
        # Nothing mounted here may propagate back to the host's mount namespace.
        mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
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


__all__ = ["IPC", "LAYERS", "MNT", "NET", "Namespaces", "shared_dirs"]
