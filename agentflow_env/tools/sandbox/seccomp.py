"""A seccomp filter for what namespaces leave open: the host's unix sockets.

A network namespace separates IP and abstract unix sockets, not unix sockets bound to a path:
those are files, reachable by path from any namespace (a Docker socket, a database, a
supervisor). The filter refuses, with ``EPERM``:

- ``socket()`` of every family but ``AF_INET`` and ``AF_INET6``, which the network namespace
  deals with (and those too when the network is to be isolated but no namespace is granted);
- ``socketpair()`` of datagram-like types, which could ``sendto()`` a path; stream and seqpacket
  pairs (what asyncio and multiprocessing use) stay allowed, since they cannot address anything;
- ``io_uring_setup``/``_enter``/``_register``: io_uring can create and connect sockets without
  calling ``socket()``.

libseccomp (through ``pyseccomp``, a ctypes binding) compiles it once per process, with its
architecture check: a system call made through another ABI (i386 ``int 0x80``, x32) kills the
process instead of slipping past the rules. The child loads the compiled program with a single
``prctl`` after ``PR_SET_NO_NEW_PRIVS``.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import sys
import tempfile
import threading

from agentflow_env.tools.sandbox.syscalls import PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prctl

_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_PAIR_TYPES = (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)
_TYPE_MASK = 0xF  # the kernel's SOCK_TYPE_MASK: the rest of the argument are flags
_IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """A compiled BPF filter, kept in memory that a forked child can hand to the kernel."""

    def __init__(self, bpf: bytes) -> None:
        if not bpf or len(bpf) % 8:
            raise ValueError("not a BPF program")
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self._fprog = _SockFprog(len(bpf) // 8, ctypes.addressof(self._buffer))

    def load(self) -> None:
        """Install the filter on the calling process (needs ``PR_SET_NO_NEW_PRIVS`` first)."""
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._fprog))


_programs: dict[bool, SeccompProgram | None] = {}
_lock = threading.Lock()


def compiled_filter(allow_ip: bool) -> SeccompProgram | None:
    """The filter (``allow_ip=False`` refuses IP sockets too), or ``None`` where pyseccomp or
    libseccomp is missing. Compiled once per process."""
    with _lock:
        if allow_ip not in _programs:
            _programs[allow_ip] = _compile(allow_ip)
        return _programs[allow_ip]


def _compile(allow_ip: bool) -> SeccompProgram | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import pyseccomp  # raises RuntimeError when libseccomp.so.2 is missing
    except (ImportError, OSError, RuntimeError):
        return None
    try:
        rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        deny = pyseccomp.ERRNO(errno.EPERM)
        if allow_ip:
            top = max(_IP_FAMILIES)
            # A 64-bit comparison: a family with any upper bit set is above ``top`` too.
            rules.add_rule(deny, "socket", pyseccomp.Arg(0, pyseccomp.GT, top))
            for family in range(top):
                if family not in _IP_FAMILIES:
                    rules.add_rule(deny, "socket", pyseccomp.Arg(0, pyseccomp.EQ, family))
        else:
            rules.add_rule(deny, "socket")
        for kind in range(_TYPE_MASK + 1):
            if kind not in _PAIR_TYPES:
                condition = pyseccomp.Arg(1, pyseccomp.MASKED_EQ, _TYPE_MASK, kind)
                rules.add_rule(deny, "socketpair", condition)
        for name in _IO_URING:
            rules.add_rule(deny, name)
        with tempfile.TemporaryFile() as handle:
            rules.export_bpf(handle)
            handle.seek(0)
            return SeccompProgram(handle.read())
    except (OSError, ValueError):
        return None


__all__ = ["SeccompProgram", "compiled_filter"]
