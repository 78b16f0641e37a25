"""``LoopSessions``: one aiohttp session per running loop, made once, closed or dropped with it."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import pytest

from agentflow_env.base.loop_sessions import LoopSessions

T = TypeVar("T")


class Opener:
    """Makes sessions and keeps them, to look at them after their loop has gone."""

    def __init__(self) -> None:
        self.made: list[aiohttp.ClientSession] = []
        self.loops: list[asyncio.AbstractEventLoop] = []

    def __call__(self) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession()
        self.made.append(session)
        self.loops.append(asyncio.get_running_loop())
        return session


def test_one_session_per_loop_made_on_first_use() -> None:
    opener = Opener()
    sessions = LoopSessions(opener)
    assert len(sessions) == 0 and opener.made == []  # nothing before the first get()

    async def twice() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        first, second = sessions.get(), sessions.get()
        await sessions.aclose()
        return first, second

    first, second = asyncio.run(twice())
    assert first is second and opener.made == [first]
    assert first.closed and len(sessions) == 0  # aclose() closed and forgot it
    assert asyncio.run(twice())[0] is not first  # another loop, another session


def test_aclose_closes_only_the_running_loops_session() -> None:
    opener = Opener()
    sessions = LoopSessions(opener)
    other = asyncio.new_event_loop()
    try:

        async def get() -> aiohttp.ClientSession:
            return sessions.get()

        kept = other.run_until_complete(get())

        async def get_then_close() -> aiohttp.ClientSession:
            session = sessions.get()
            await sessions.aclose()
            await sessions.aclose()  # nothing left to close: a no-op
            return session

        closed = asyncio.run(get_then_close())
        assert closed.closed and not kept.closed and len(sessions) == 1
        other.run_until_complete(sessions.aclose())
        assert kept.closed and len(sessions) == 0
    finally:
        other.close()


def test_a_session_closed_elsewhere_is_replaced() -> None:
    sessions = LoopSessions(Opener())

    async def main() -> None:
        first = sessions.get()
        await first.close()
        second = sessions.get()
        assert second is not first and not second.closed and len(sessions) == 1
        await sessions.aclose()

    asyncio.run(main())


def test_a_closed_loops_session_is_dropped_without_warnings() -> None:
    opener = Opener()
    sessions = LoopSessions(opener)

    async def get() -> None:
        sessions.get()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(get())  # the loop closes with its session open
        first = opener.made[0]
        assert not first.closed and len(sessions) == 1
        asyncio.run(get())  # the next loop's session replaces it
        assert len(sessions) == 1 and first.closed and first.connector is None
        del first
        opener.made.clear()
        opener.loops.clear()
        gc.collect()
    assert not [w for w in caught if "Unclosed" in str(w.message)], [str(w) for w in caught]


def test_a_holder_that_goes_drops_its_closed_loops_sessions() -> None:
    opener = Opener()
    sessions = LoopSessions(opener)

    async def get(holder: LoopSessions[aiohttp.ClientSession]) -> None:
        holder.get()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(get(sessions))
        (session,) = opener.made
        del sessions
        gc.collect()
        assert session.closed and session.connector is None
        del session
        opener.made.clear()
        opener.loops.clear()
        gc.collect()
    assert not [w for w in caught if "Unclosed" in str(w.message)], [str(w) for w in caught]


@dataclass
class Pool:
    http: aiohttp.ClientSession
    semaphore: asyncio.Semaphore


def http_of(pool: Pool) -> aiohttp.ClientSession:
    return pool.http


def test_a_value_that_holds_the_session_and_more() -> None:
    sessions = LoopSessions(lambda: Pool(aiohttp.ClientSession(), asyncio.Semaphore(2)), http_of)

    async def main() -> Pool:
        pool = sessions.get()
        assert sessions.get() is pool
        await pool.http.close()  # its session closed: the whole value is made anew
        assert sessions.get() is not pool
        await sessions.aclose()
        return pool

    assert asyncio.run(main()).http.closed and len(sessions) == 0


def test_threads_each_with_their_own_loop() -> None:
    opener = Opener()
    sessions = LoopSessions(opener)
    start = threading.Barrier(8)
    got: list[tuple[aiohttp.ClientSession, aiohttp.ClientSession]] = []

    async def use() -> None:
        start.wait(timeout=10)  # every thread asks at about the same time
        first = sessions.get()
        await asyncio.sleep(0)
        got.append((first, sessions.get()))
        await sessions.aclose()

    threads = [threading.Thread(target=asyncio.run, args=(use(),)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(got) == 8 and all(first is second for first, second in got)
    assert len({id(first) for first, _ in got}) == 8 == len(opener.made)
    assert len(sessions) == 0 and all(session.closed for session in opener.made)


def test_get_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        LoopSessions(Opener()).get()


def test_importing_it_does_not_import_aiohttp() -> None:
    code = "import sys, agentflow_env.base.loop_sessions; sys.exit('aiohttp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
