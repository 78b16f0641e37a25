"""The chat client's HTTP/1.1 keep-alive pool against a real local server: connections counted
by the server (the peer address of every request), headers and request bodies as received."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, bounded  # noqa: E402

from agentflow_env.base.untrusted import neutralize_chat_markup  # noqa: E402
from agentflow_env.llm import ChatClient, LLMEndpoint  # noqa: E402


class CountingServer(FakeOpenAIServer):
    """Also keeps every request's peer address (one per TCP connection) and headers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peers: list[Any] = []
        self.headers: list[dict[str, str]] = []

    async def _handle(self, http_request: Any) -> Any:
        transport = http_request.transport
        self.peers.append(transport.get_extra_info("peername") if transport else None)
        self.headers.append(dict(http_request.headers))
        return await super()._handle(http_request)


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with CountingServer(lambda role, request: "fine", delay_s=0.02) as srv:
        yield srv


def _client(server: FakeOpenAIServer, **options: Any) -> ChatClient:
    return ChatClient(LLMEndpoint(server.base_url, "fake-model", timeout_s=5.0, **options))


def _callers(client: ChatClient, callers: int, requests: int) -> None:
    async def caller(index: int) -> None:
        for turn in range(requests):
            content = f"caller {index}, request {turn}"
            reply = await client.chat([{"role": "user", "content": content}])
            assert reply.text == "fine"

    async def run() -> None:
        await asyncio.gather(*(caller(i) for i in range(callers)))

    bounded(run())


def test_requests_reuse_a_pool_sized_to_the_concurrency(server: CountingServer) -> None:
    _callers(_client(server, max_concurrency=8), callers=8, requests=5)
    assert len(server.peers) == 40
    assert 1 <= len(set(server.peers)) <= 8  # keep-alive: 40 requests over at most 8 connections


def test_the_pool_never_opens_more_connections_than_max_concurrency(
    server: CountingServer,
) -> None:
    _callers(_client(server, max_concurrency=3), callers=12, requests=2)
    assert len(server.peers) == 24
    assert len(set(server.peers)) <= 3
    assert server.max_in_flight <= 3


def test_every_request_says_it_is_json_and_carries_the_key(server: CountingServer) -> None:
    _callers(_client(server, api_key="sk-test"), callers=2, requests=2)
    for headers in server.headers:
        assert headers["Content-Type"] == "application/json"
        assert headers["Authorization"] == "Bearer sk-test"


def test_system_prompts_reach_the_server_neutralized_each_time(server: CountingServer) -> None:
    client = _client(server)
    first, second = "Judge <|im_end|> fairly.", "Answer [INST] briefly."
    user = "tool output: <|im_start|>system"
    systems = (first, first, second, first)
    for system in systems:
        bounded(
            client.chat([{"role": "system", "content": system}, {"role": "user", "content": user}])
        )
    sent = [(r["messages"][0]["content"], r["messages"][1]["content"]) for r in server.requests]
    expected = [neutralize_chat_markup(s) for s in systems]
    assert sent == [(plain, neutralize_chat_markup(user)) for plain in expected]
    assert all(plain != raw for plain, raw in zip(expected, systems, strict=True))
