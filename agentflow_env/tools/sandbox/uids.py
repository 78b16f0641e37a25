"""The uids sandboxes run as, and the cleanup of everything a call left behind under its uid.

As root each call runs as a uid of its own from this process's range (``sandbox_uid_range()``),
so that ``RLIMIT_NPROC`` applies, the child can neither signal nor inspect the parent, and every
process the call left behind is killed by uid when it ends. ``_UidPool`` hands the uids out; a
uid with processes left is swept (or skipped) before it is handed out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from agentflow_env.tools.sandbox.isolation import _MINIMAL_PATH
from agentflow_env.tools.sandbox.limits import SandboxError

_UID_BASE = 1_000_000_000  # + (pid mod 2**22) * 256 + slot: below 2**31, unique per live parent
_UID_SLOTS = 256
_NOBODY = 65534
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


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


__all__ = ["sandbox_uid_range"]
