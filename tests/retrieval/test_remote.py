"""Retriever replicas behind the env (client-side balancing and fail-over), the server's HTTP
as clients see it (keep-alive, pipelining, refusals), its worker processes, and the client's
HTTP (stale keep-alive connections, chunked answers, proxies)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.retrieval.bm25 import get_index
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.retrieval.remote import (
    RemoteRetriever,
    RetrieverUnavailable,
    retriever_urls,
)
from agentflow_env.retrieval.server import RetrieverServerHandle, start_retriever_server
from agentflow_env.tools.search import SearchTool

DOCS = [
    Document(f"d{i}", f"Quillon{i} Marsh", f"Quillon{i} Marsh lies north of Quillon{(i + 3) % 30}.")
    for i in range(30)
] + [
    Document("eiffel", '"Eiffel Tower"', "Wrought-iron tower in Paris, built by Gustave Eiffel."),
    Document("paris", "Paris", "Capital of France."),
]
QUERIES = [f"Quillon{i} Marsh" for i in range(30)]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_documents(DOCS)


@pytest.fixture
def replicas(corpus: Corpus) -> Iterator[list[RetrieverServerHandle]]:
    servers = [start_retriever_server(corpus, "127.0.0.1", 0) for _ in range(2)]
    yield servers
    for server in servers:
        server.stop()


def expected(corpus: Corpus, queries: list[str], k: int) -> list[list[tuple[str, float]]]:
    hits = get_index(corpus).search_batch(queries, k)
    return [[(doc.doc_id, score) for doc, score in row] for row in hits]


def found(rows: list[list[Any]]) -> list[list[tuple[str, float]]]:
    return [[(doc.doc_id, score) for doc, score in row] for row in rows]


# -- replicas -----------------------------------------------------------------------------------
def test_requests_are_spread_over_the_replicas(
    replicas: list[RetrieverServerHandle], corpus: Corpus
) -> None:
    retriever = RemoteRetriever([server.url for server in replicas])

    async def search_all() -> list[list[Any]]:
        return await asyncio.gather(*(retriever.search(q, 2) for q in QUERIES))

    assert found(asyncio.run(search_all())) == expected(corpus, QUERIES, 2)
    served = [server.stats.as_dict()["requests"] for server in replicas]
    assert sum(served) == len(QUERIES) and min(served) >= len(QUERIES) // 4, served


def test_queries_keep_succeeding_when_a_replica_stops_mid_test(
    replicas: list[RetrieverServerHandle], corpus: Corpus
) -> None:
    first, second = replicas
    retriever = RemoteRetriever(f"{first.url}, {second.url}/retrieve", max_retries=0)
    assert retriever.urls == [first.url, second.url] and retriever.tries == 2
    rounds = 12

    async def searches() -> list[list[list[Any]]]:
        answers = []
        for number in range(rounds):
            batch = asyncio.gather(*(retriever.search(q, 3) for q in QUERIES))
            if number == rounds // 3:  # one replica goes away while requests are in flight
                stopping = asyncio.create_task(asyncio.to_thread(first.stop))
            answers.append(await batch)
        await stopping
        return answers

    answers = asyncio.run(searches())
    want = expected(corpus, QUERIES, 3)
    assert all(found(rows) == want for rows in answers)
    before = first.stats.as_dict()["requests"]
    assert 0 < before < rounds * len(QUERIES)
    # The stopped replica was tried and failed; the other answered the rest (and the requests
    # the stopped one had in flight, unanswered).
    assert retriever.replicas[0].failures >= 1
    assert second.stats.as_dict()["requests"] >= rounds * len(QUERIES) - before


def test_a_down_replica_is_retried_on_the_other_at_once(
    replicas: list[RetrieverServerHandle], corpus: Corpus
) -> None:
    first, second = replicas
    first.stop()
    retriever = RemoteRetriever([first.url, second.url], max_retries=0, backoff_s=5.0)
    for query in QUERIES[:6]:  # round robin sends some of these to the stopped one first
        started = time.perf_counter()
        assert found([asyncio.run(retriever.search(query, 1))]) == expected(corpus, [query], 1)
        assert time.perf_counter() - started < 2.0  # no backoff wait before the other replica
    assert retriever.replicas[0].failures >= 1 and retriever.replicas[1].failures == 0
    assert second.stats.as_dict()["requests"] == 6


def test_a_replica_that_hangs_times_out_and_the_other_answers(
    replicas: list[RetrieverServerHandle], corpus: Corpus
) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        hung = f"http://127.0.0.1:{silent.getsockname()[1]}"
        retriever = RemoteRetriever([hung, replicas[1].url], timeout_s=0.3, max_retries=0)
        started = time.perf_counter()
        for query in QUERIES[:4]:
            assert found([asyncio.run(retriever.search(query, 2))]) == expected(corpus, [query], 2)
        # After its first timeout the hung replica rests (1 s): the others go to the other.
        assert retriever.replicas[0].failures >= 1
        assert time.perf_counter() - started < 0.3 * retriever.replicas[0].failures + 2.0


def test_every_replica_down_names_them_all() -> None:
    ports = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    retriever = RemoteRetriever(",".join(urls), max_retries=1, backoff_s=0.01)
    assert retriever.tries == 3
    with pytest.raises(RetrieverUnavailable, match=r"retrievers at .* unreachable after 3 tries"):
        asyncio.run(retriever.search("q", 1))


def test_retriever_urls() -> None:
    assert retriever_urls("") == [] and retriever_urls(" , ") == []
    assert retriever_urls("http://a:1, https://b/retrieve") == ["http://a:1", "https://b/retrieve"]
    assert retriever_urls(["http://a", "http://b,http://c"]) == ["http://a", "http://b", "http://c"]
    with pytest.raises(ValueError, match="must start with http"):
        retriever_urls(["http://a", "b:9"])


# -- the env ------------------------------------------------------------------------------------
def test_config_takes_a_list_or_comma_separated_urls() -> None:
    listed = SearchEnvConfig(retriever_url=["http://127.0.0.1:9", "http://127.0.0.1:10/retrieve"])
    assert listed.retriever_url == "http://127.0.0.1:9,http://127.0.0.1:10/retrieve"
    assert SearchEnvConfig.from_dict(listed.to_dict()) == listed
    single = SearchEnvConfig(retriever_url="http://127.0.0.1:9")
    assert single.retriever_url == "http://127.0.0.1:9"
    with pytest.raises(ValueError, match="retriever_url: retriever URL must start with http"):
        SearchEnvConfig(retriever_url=["http://127.0.0.1:9", "127.0.0.1:10"])
    with pytest.raises(ValueError, match="retriever_url"):
        SearchEnvConfig(retriever_url=["http://127.0.0.1:9", 10])
    tool = SearchTool(retriever_url=listed.retriever_url)
    assert tool.remote is not None
    assert tool.remote.urls == ["http://127.0.0.1:9", "http://127.0.0.1:10"]


def test_env_searches_through_two_replicas_and_survives_one_stopping(
    tmp_path: Path, corpus: Corpus
) -> None:
    qa = tmp_path / "qa.jsonl"
    row = {"id": "q0", "question": "Who built the Eiffel Tower?", "golden_answers": ["Eiffel"]}
    qa.write_text(json.dumps(row) + "\n", encoding="utf-8")
    first = start_retriever_server(corpus, "127.0.0.1", 0)
    second = start_retriever_server(corpus, "127.0.0.1", 0)
    action = "Context: Eiffel Tower\nSub-Goal: find the builder\nTool Name: Search"
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(qa),
        retriever_url=[first.url, second.url],
        max_turns=2,
    )
    try:
        (search,) = [t for t in env.unwrapped.tools if isinstance(t, SearchTool)]
        assert search.remote is not None and search.remote.urls == [first.url, second.url]
        for episode in range(4):
            if episode == 2:
                first.stop()
            env.reset(seed=episode)
            _, reward, terminated, _, info = env.step(action)
            assert terminated and reward == 1.0, info
        assert second.stats.as_dict()["requests"] >= 2
    finally:
        env.close()
        first.stop()
        second.stop()


# -- the server's HTTP --------------------------------------------------------------------------
def split_answers(data: bytes) -> list[tuple[bytes, bytes]]:
    """The complete ``(head, body)`` answers at the start of ``data``."""
    answers = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        if len(rest) < length:
            break
        answers.append((head, rest[:length]))
        data = rest[length:]
    return answers


def exchange(port: int, data: bytes, until_closed: bool = False, answers: int = 1) -> bytes:
    """Send ``data`` on one connection; read ``answers`` answers (or until the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while until_closed or len(split_answers(received)) < answers:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def post_bytes(body: dict[str, Any], extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    head = f"POST /retrieve HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def test_keep_alive_and_pipelined_requests_are_answered_in_order(
    replicas: list[RetrieverServerHandle],
) -> None:
    port = replicas[0].port
    pipelined = b"".join(post_bytes({"queries": [q], "topk": 1}) for q in QUERIES[:5])
    pipelined += b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = exchange(port, pipelined, answers=6)
    bodies = [json.loads(body) for _, body in split_answers(answer)]
    assert [body["result"][0][0]["id"] for body in bodies[:5]] == [f"d{i}" for i in range(5)]
    assert bodies[5]["status"] == "ok" and bodies[5]["workers"] == 1
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 6 and b"Connection: close" not in answer


def test_refusals_and_connection_endings(replicas: list[RetrieverServerHandle]) -> None:
    port = replicas[0].port
    no_length = exchange(port, b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert no_length.startswith(b"HTTP/1.1 411 ") and b"Connection: close" in no_length
    huge = exchange(  # refused from its Content-Length, closed after (at most) 1 s of draining
        port,
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
        until_closed=True,
    )
    assert huge.startswith(b"HTTP/1.1 413 ") and b"body larger than" in huge
    garbage = exchange(port, b"HELLO\r\n\r\n", until_closed=True)  # no version: answered in 1.0
    assert garbage.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 "))
    put = exchange(
        port, b"PUT /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", until_closed=True
    )
    assert put.startswith(b"HTTP/1.1 501 ")
    old = post_bytes({"queries": ["Quillon2 Marsh"]}).replace(b"HTTP/1.1", b"HTTP/1.0")
    answer = exchange(port, old, until_closed=True)  # HTTP/1.0 without keep-alive: closed
    assert answer.startswith(b"HTTP/1.0 200 ") and b'"id": "d2"' in answer
    closing = exchange(port, post_bytes({"queries": ["x"]}, "Connection: close\r\n"), True)
    assert closing.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in closing


def test_expect_100_continue(replicas: list[RetrieverServerHandle]) -> None:
    data = json.dumps({"queries": ["Quillon4 Marsh"], "topk": 1}).encode()
    head = (
        "POST /retrieve HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", replicas[0].port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(data)
        answer = b""
        while b'"d4"' not in answer:
            chunk = sock.recv(65536)
            assert chunk
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_serve_retriever_with_two_workers(tmp_path: Path) -> None:
    corpus_path = tmp_path / "wiki.jsonl"
    lines = [json.dumps({"id": d.doc_id, "contents": d.contents}) for d in DOCS]
    corpus_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "agentflow_env.cli", "serve-retriever", "--corpus"]
    command += [str(corpus_path), "--port", "0", "--cache-dir", str(tmp_path / "c")]
    command += ["--workers", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"serving {len(DOCS)} documents at http://127.0.0.1:"), line
        assert process.stdout.readline().rstrip().endswith("; 2 workers")
        url = line.split(" at ")[1].strip().removesuffix("/retrieve")
        workers = set()
        for _ in range(200):  # each urlopen is a new connection; the kernel spreads them
            with urllib.request.urlopen(url + "/health", timeout=10) as response:
                health = json.loads(response.read())
            assert health["workers"] == 2 and health["documents"] == len(DOCS)
            workers.add(health["worker"])
            if workers == {0, 1}:
                break
        assert workers == {0, 1}
        retriever = RemoteRetriever(url)

        async def search_all() -> list[list[Any]]:
            return await asyncio.gather(*(retriever.search(q, 3) for q in QUERIES))

        corpus = Corpus.from_documents(DOCS)
        assert found(asyncio.run(search_all())) == expected(corpus, QUERIES, 3)
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


# -- the client's HTTP --------------------------------------------------------------------------
GOOD = json.dumps({"result": [[{"document": {"id": "1", "contents": "T\nbody"}, "score": 2.5}]]})


class RawServer:
    """Answers each request with ``answer(number)`` bytes, then maybe closes the connection."""

    def __init__(self, answer: Any, close_after: bool) -> None:
        self.answer, self.close_after = answer, close_after
        self.requests = 0
        self.connections = 0
        self.heads: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                self.heads.append(head)
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.requests += 1
                conn.sendall(self.answer(self.requests))
                if self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


def test_a_kept_alive_connection_closed_by_the_server_is_replaced() -> None:
    body = GOOD.encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = RawServer(lambda _: answer, close_after=True)  # closes without saying so
    try:
        retriever = RemoteRetriever(server.url, max_retries=0)

        async def sequential() -> list[Any]:
            results = []
            for _ in range(4):
                results.append(await retriever.search("q", 1))
                await asyncio.sleep(0.05)  # the server's close arrives while idle
            return results

        results = asyncio.run(sequential())
        assert all(result == [(Document("1", "T", "body"), 2.5)] for result in results)
        assert server.requests == 4 and server.connections == 4
        assert retriever.replicas[0].failures == 0
    finally:
        server.close()


def test_chunked_and_keep_alive_answers() -> None:
    body = GOOD.encode()
    middle = len(body) // 2
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n" % (middle, body[:middle])
        + b"%x;ext=1\r\n%s\r\n" % (len(body) - middle, body[middle:])
        + b"0\r\n\r\n"
    )
    server = RawServer(lambda _: chunked, close_after=False)
    try:
        retriever = RemoteRetriever(server.url)

        async def three() -> list[Any]:
            return [await retriever.search("q", 1) for _ in range(3)]

        assert asyncio.run(three()) == [[(Document("1", "T", "body"), 2.5)]] * 3
        assert server.connections == 1  # one kept-alive connection for all three
    finally:
        server.close()


def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    body = GOOD.encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    proxy = RawServer(lambda _: answer, close_after=False)
    direct = RawServer(lambda _: answer, close_after=False)
    for name in ("http_proxy", "no_proxy"):  # the lower-case ones would win
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    try:
        retriever = RemoteRetriever(["http://retriever.invalid:8000", direct.url], max_retries=0)

        async def both() -> list[Any]:
            return [await retriever.search("q", 1) for _ in range(2)]  # one on each replica

        assert asyncio.run(both()) == [[(Document("1", "T", "body"), 2.5)]] * 2
        assert proxy.requests == 1 and direct.requests == 1
        assert proxy.heads[0].startswith(b"POST http://retriever.invalid:8000/retrieve HTTP/1.1")
        assert direct.heads[0].startswith(b"POST /retrieve HTTP/1.1")
    finally:
        proxy.close()
        direct.close()
