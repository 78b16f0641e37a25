"""The few Linux system calls the sandbox makes through libc (Python 3.11 has no ``os.unshare``
nor ``mount``): each is safe to call in a forked child before exec and raises ``OSError``."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000


def _libc_function(name: str, argtypes: list[Any]) -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_unshare = _libc_function("unshare", [ctypes.c_int])
_prctl = _libc_function("prctl", [ctypes.c_int] + [ctypes.c_ulong] * 4)
_mount = _libc_function("mount", [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p])


def _call(function: Any, name: str, *args: Any) -> None:
    if function is None:
        raise OSError(38, f"{name} is not available here")  # ENOSYS
    if function(*args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}: {os.strerror(error)}")


def unshare(flags: int) -> None:
    _call(_unshare, f"unshare({flags:#x})", flags)


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _call(_prctl, f"prctl({option})", option, arg2, arg3, 0, 0)


def mount(
    source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    _call(_mount, f"mount({target!r})", source, target, fstype, flags, data)


def write_proc_self(name: str, text: str) -> None:
    """Write ``text`` to ``/proc/self/<name>`` (uid_map, gid_map, setgroups) in one write."""
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
