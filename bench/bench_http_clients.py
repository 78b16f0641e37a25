"""httpx vs aiohttp as the LLM client's transport: many concurrent callers against one server.

A scripted OpenAI-compatible server (``tests/fake_openai_server.py``, its own process so it does
not share our GIL) answers every ``POST /v1/chat/completions`` after ``--delay`` seconds.
``--callers`` coroutines on one event loop each send ``--requests`` requests one after another
(the pattern of many episodes sharing one client), and each client configuration is timed:

- httpx, one ``AsyncClient`` whose pool holds ``--callers`` connections;
- httpx, ``--pools`` clients of ``callers / pools`` connections each, callers spread over them;
- aiohttp, one ``ClientSession`` with a ``TCPConnector(limit=callers)`` (what the package uses);
- the package's ``ChatClient`` over that (the same request; its own cost on top: building and
  neutralizing the body, the deadline, the retry loop, reading the choice).

Wall time is from the first request to the last reply; client CPU is this process's CPU time
over the same span (the server's CPU is not counted). Every reply's JSON is parsed. Each
configuration runs ``--repeats`` times (fresh client each time, connections opened inside the
timed span); the table shows the median run, and how many connections each run opened (all
clients keep them alive: at most one per caller). The ideal wall time is
``requests x delay`` (every caller always waiting on the server).

    python bench/bench_http_clients.py --callers 64 --requests 6 --delay 0.1 --repeats 3

Needs ``httpx`` and ``aiohttp`` (both core dependencies).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from importlib.metadata import version
from typing import Any

from fake_server import start_fake_server

MESSAGES = [{"role": "user", "content": "Which tool should run next?"}]
BODY = json.dumps(
    {"model": "fake", "messages": MESSAGES, "temperature": 0.0, "max_tokens": 64},
    ensure_ascii=False,
).encode()
HEADERS = {"Content-Type": "application/json"}

Post = Callable[[int], Awaitable[None]]


def _check(reply: dict[str, Any]) -> None:
    if not reply["choices"][0]["message"]["content"]:
        raise RuntimeError(f"empty reply: {reply}")


async def _drive(post: Post, callers: int, requests: int) -> tuple[float, float]:
    """Wall and CPU seconds for ``callers`` coroutines sending ``requests`` requests each."""

    async def caller(index: int) -> None:
        for _ in range(requests):
            await post(index)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return time.perf_counter() - started, time.process_time() - cpu


async def run_httpx(url: str, callers: int, requests: int, pools: int) -> tuple[float, float]:
    import httpx

    per_pool = max(1, callers // pools)
    limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
    clients = [httpx.AsyncClient(limits=limits, timeout=60.0) for _ in range(pools)]

    async def post(index: int) -> None:
        response = await clients[index % pools].post(url, content=BODY, headers=HEADERS)
        response.raise_for_status()
        _check(response.json())

    try:
        return await _drive(post, callers, requests)
    finally:
        for client in clients:
            await client.aclose()


async def run_aiohttp(url: str, callers: int, requests: int) -> tuple[float, float]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=callers),
        timeout=aiohttp.ClientTimeout(total=60.0),
    )

    async def post(index: int) -> None:
        async with session.post(url, data=BODY, headers=HEADERS) as response:
            response.raise_for_status()
            _check(await response.json())

    try:
        return await _drive(post, callers, requests)
    finally:
        await session.close()


async def run_chat_client(base_url: str, callers: int, requests: int) -> tuple[float, float]:
    from agentflow_env.llm import ChatClient, LLMEndpoint

    endpoint = LLMEndpoint(base_url, "fake", max_concurrency=callers, max_tokens=64)
    client = ChatClient(endpoint)

    async def post(index: int) -> None:
        if not (await client.chat(MESSAGES)).text:
            raise RuntimeError("empty reply")

    try:
        return await _drive(post, callers, requests)
    finally:
        await client.aclose()


class _Connections:
    """Counts the TCP connections aiohttp opens (httpx's are not counted)."""

    def __init__(self) -> None:
        self.opened = 0

    def __enter__(self) -> _Connections:
        import aiohttp

        self._connector = aiohttp.TCPConnector
        self._create = create = self._connector._create_connection

        async def counted(connector: Any, *args: Any, **kwargs: Any) -> Any:
            self.opened += 1
            return await create(connector, *args, **kwargs)

        self._connector._create_connection = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._connector._create_connection = self._create  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> list[tuple[str, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=64, help="concurrent callers")
    parser.add_argument("--requests", type=int, default=6, help="requests per caller")
    parser.add_argument("--delay", type=float, default=0.1, help="server latency per request (s)")
    parser.add_argument("--pools", type=int, default=8, help="httpx pools in the split setup")
    parser.add_argument("--repeats", type=int, default=3, help="runs per client (median shown)")
    args = parser.parse_args(argv)

    process, port = start_fake_server("--delay", str(args.delay))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    per_pool = max(1, args.callers // args.pools)
    setups: list[tuple[str, Callable[[], Coroutine[Any, Any, tuple[float, float]]]]] = [
        (
            f"httpx {version('httpx')}, one pool of {args.callers}",
            lambda: run_httpx(url, args.callers, args.requests, 1),
        ),
        (
            f"httpx {version('httpx')}, {args.pools} pools of {per_pool}",
            lambda: run_httpx(url, args.callers, args.requests, args.pools),
        ),
        (
            f"aiohttp {version('aiohttp')}, one pool of {args.callers}",
            lambda: run_aiohttp(url, args.callers, args.requests),
        ),
        (
            f"ChatClient (aiohttp), one pool of {args.callers}",
            lambda: run_chat_client(f"http://127.0.0.1:{port}/v1", args.callers, args.requests),
        ),
    ]
    rows = []
    try:
        for label, setup in setups:
            runs, opened = [], []
            for _ in range(args.repeats):
                with _Connections() as connections:
                    runs.append(asyncio.run(setup()))
                opened.append(connections.opened)
            runs.sort()
            wall, cpu = runs[len(runs) // 2]
            spread = f"{runs[0][0]:.2f}-{runs[-1][0]:.2f} s"
            rows.append((label, wall, cpu))
            shown = "" if label.startswith("httpx") else f", connections opened {opened}"
            print(
                f"{label}: wall {wall:.2f} s (runs {spread}), client CPU {cpu:.2f} s{shown}",
                flush=True,
            )
    finally:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=10)

    ideal = args.requests * args.delay
    print()
    print(
        f"{args.callers} concurrent callers x {args.requests} requests, server delay "
        f"{args.delay * 1000:.0f} ms (ideal wall {ideal:.1f} s); median of {args.repeats} runs"
    )
    print()
    print("| client | wall | client CPU |")
    print("|---|---|---|")
    for label, wall, cpu in rows:
        print(f"| {label} | {wall:.2f} s | {cpu:.2f} s |")
    return rows


if __name__ == "__main__":
    main()
