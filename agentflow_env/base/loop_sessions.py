"""What an HTTP client shared by many event loops keeps per loop: its aiohttp session.

An aiohttp session (its connection pool) is bound to the event loop that created it, and each env
drives its sessions on its own private loop, so a client shared by every env of the process (the
LLM client, the remote retriever) keeps one session per loop: ``LoopSessions``. The session is
made on first use in a loop, by a function the client gives (its connector, headers, and anything
else that lives per loop, such as a semaphore); ``aclose()`` closes the running loop's. A loop
that closed without that (``asyncio.run`` does not close the sessions of its loop) cannot close
its session the async way any more: the session is dropped when the next loop opens one, or when
the holder goes, its pool marked closed at once (its sockets close when collected).

aiohttp is never imported here: the clients make the sessions, and import it when they do.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    import aiohttp

__all__ = ["LoopSessions"]

T = TypeVar("T")


class LoopSessions(Generic[T]):
    """Per running event loop, one ``T`` that holds an aiohttp ``ClientSession``.

    Args:
        open: makes the running loop's ``T`` (called on that loop, once, and again only after
            its session was closed).
        session_of: the session inside a ``T``; leave it out when ``T`` is the session itself.

    Neither function should refer to the client that owns the holder: the holder keeps ``open``,
    and its finalizer keeps ``session_of`` until the holder goes. Safe to share across loops and
    threads: ``get()`` takes no lock once the running loop has its session.
    """

    @overload
    def __init__(
        self: LoopSessions[aiohttp.ClientSession], open: Callable[[], aiohttp.ClientSession]
    ) -> None: ...

    @overload
    def __init__(
        self, open: Callable[[], T], session_of: Callable[[T], aiohttp.ClientSession]
    ) -> None: ...

    def __init__(
        self,
        open: Callable[[], Any],
        session_of: Callable[[Any], aiohttp.ClientSession] | None = None,
    ) -> None:
        self._open = open
        self._session_of: Callable[[Any], aiohttp.ClientSession] = session_of or _itself
        # Keyed by the loop itself, not weakly: a session refers to its loop, so a weak key would
        # never expire anyway. Entries of closed loops go in _drop_closed_loops.
        self._per_loop: dict[asyncio.AbstractEventLoop, T] = {}
        self._lock = threading.Lock()
        # Collected (or at exit), it drops its closed loops' sessions without warnings.
        weakref.finalize(self, _drop_closed_loops, self._per_loop, self._session_of)

    def get(self) -> T:
        """The running loop's ``T``, made on first use (or anew after its session was closed)."""
        loop = asyncio.get_running_loop()
        value = self._per_loop.get(loop)  # a dict lookup is atomic: no lock on this path
        if value is None or self._session_of(value).closed:
            with self._lock:
                value = self._per_loop.get(loop)
                if value is None or self._session_of(value).closed:
                    _drop_closed_loops(self._per_loop, self._session_of)
                    value = self._per_loop[loop] = self._open()
        return value

    async def aclose(self) -> None:
        """Close the running loop's session (the other loops' are kept)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            value = self._per_loop.pop(loop, None)
        if value is not None:
            await self._session_of(value).close()

    def __len__(self) -> int:
        """How many loops have a session."""
        return len(self._per_loop)


def _itself(value: Any) -> Any:
    return value


def _drop_closed_loops(
    per_loop: dict[asyncio.AbstractEventLoop, Any],
    session_of: Callable[[Any], aiohttp.ClientSession],
) -> None:
    """Forget the sessions of loops that have closed. A closed loop's session can no longer be
    closed the async way: its pool is marked closed (its sockets close when collected), so it is
    dropped without a misleading "Unclosed client session"."""
    # list() copies the keys in one step: another thread may add a loop while this one looks.
    for loop in [loop for loop in list(per_loop) if loop.is_closed()]:
        value = per_loop.pop(loop, None)
        if value is None:
            continue
        session = session_of(value)
        connector = session.connector
        session.detach()
        if connector is not None:
            connector._close()  # sync and safe on a closed loop; close() needs the loop
