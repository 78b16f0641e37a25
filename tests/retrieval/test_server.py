"""Retriever server (Search-R1 protocol), remote client, remote SearchTool and the disk index cache."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentflow_env.cli import main
from agentflow_env.retrieval import index_store
from agentflow_env.retrieval.bm25 import BM25Index, clear_index_cache, get_index
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.retrieval.index_store import (
    IndexStoreError,
    build_index,
    index_dir,
    load_index,
    load_or_build_index,
    save_index,
)
from agentflow_env.retrieval.remote import RemoteRetriever, RetrieverError, RetrieverUnavailable
from agentflow_env.retrieval.server import RetrieverServerHandle, start_retriever_server
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.search import RETRIEVER_URL_ENV_VAR, SearchTool

CITIES = ["Paris", "Zürich", "Lima", "Oslo", "Kyoto", "Accra", "Quito"]
DOCS = tuple(
    Document(
        f"doc{i}",
        f"Vendrel{i} Ostrakon",
        f"Vendrel{i} Ostrakon was founded in {1800 + i} in {CITIES[i % 7]}; "
        f"its rival was Vendrel{(i + 1) % 40} and it trades {['salt', 'tin', 'wool'][i % 3]}.",
    )
    for i in range(40)
) + (Document("long", "Longdoc", "word " * 400), Document("empty", "", ""))
QUERIES = [
    "Vendrel3 Ostrakon",
    "founded 1805 Lima",
    "Zürich salt",
    "zzz unknownword",
    "",
    "Longdoc word",
    "tin wool rival Vendrel12",
]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_documents(DOCS)


@pytest.fixture(scope="module")
def server(corpus: Corpus) -> Iterator[RetrieverServerHandle]:
    with start_retriever_server(corpus, "127.0.0.1", 0) as handle:
        yield handle


def post(url: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- server protocol ------------------------------------------------------------------------------
def test_batched_request_with_scores(server: RetrieverServerHandle, corpus: Corpus) -> None:
    status, body = post(
        server.url + "/retrieve", {"queries": QUERIES, "topk": 2, "return_scores": True}
    )
    assert status == 200
    expected = get_index(corpus).search_batch(QUERIES, 2)
    assert len(body["result"]) == len(QUERIES)
    for row, hits in zip(body["result"], expected, strict=True):
        assert [item["document"]["id"] for item in row] == [doc.doc_id for doc, _ in hits]
        assert [item["document"]["contents"] for item in row] == [d.contents for d, _ in hits]
        assert [item["score"] for item in row] == [score for _, score in hits]
    assert body["result"][0][0]["document"] == {"id": "doc3", "contents": DOCS[3].contents}


def test_without_scores_uses_the_default_topk(server: RetrieverServerHandle) -> None:
    status, body = post(server.url + "/retrieve", {"queries": ["Vendrel7 Ostrakon", "founded"]})
    assert status == 200
    first, second = body["result"]
    assert first[0] == {"id": "doc7", "contents": DOCS[7].contents}
    assert len(second) == 3 and all(set(doc) == {"id", "contents"} for doc in second)
    assert post(server.url + "/retrieve", {"queries": []}) == (200, {"result": []})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ([1, 2], "JSON object"),
        ({}, "'queries' must be a list"),
        ({"queries": "one query"}, "'queries' must be a list"),
        ({"queries": ["a", 3]}, "'queries' must be a list"),
        ({"queries": ["a"], "topk": "3"}, "'topk'"),
        ({"queries": ["a"], "topk": True}, "'topk'"),
        ({"queries": ["a"], "return_scores": "yes"}, "'return_scores'"),
    ],
)
def test_malformed_requests_get_400(server: RetrieverServerHandle, body: Any, message: str) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer = post(server.url + "/retrieve", data)
    assert status == 400
    assert message in answer["error"]


def test_health_and_unknown_paths(server: RetrieverServerHandle, corpus: Corpus) -> None:
    with urllib.request.urlopen(server.url + "/health", timeout=10) as response:
        health = json.loads(response.read())
    assert health["status"] == "ok" and health["documents"] == len(corpus)
    assert health["corpus_id"] == corpus.corpus_id
    assert post(server.url + "/nope", {"queries": []})[0] == 404


def test_concurrent_requests_are_merged_into_batches(corpus: Corpus) -> None:
    with start_retriever_server(corpus, "127.0.0.1", 0, batch_window_s=0.05) as handle:
        barrier = threading.Barrier(12)
        answers: dict[int, Any] = {}

        def client(i: int) -> None:
            barrier.wait()
            answers[i] = post(handle.url + "/retrieve", {"queries": [f"Vendrel{i} Ostrakon"]})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert all(answers[i][1]["result"][0][0]["id"] == f"doc{i}" for i in range(12))
        stats = handle.stats.as_dict()
        assert stats["requests"] == 12 and stats["batches"] < 12


# -- remote search tool -----------------------------------------------------------------------------
@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_search_tool_same_documents_locally_and_remotely(
    server: RetrieverServerHandle, corpus: Corpus, top_k: int
) -> None:
    local = SearchTool(retriever_url="", max_chars_per_document=60)
    remote = SearchTool(retriever_url=server.url, max_chars_per_document=60)
    assert local.remote is None and remote.remote is not None
    assert remote.card == local.card

    async def both(query: str) -> tuple[Any, Any]:
        arguments = {"query": query, "top_k": top_k}
        here = await local.run(arguments, ToolContext(corpus=corpus))
        there = await remote.run(arguments, ToolContext(corpus=None))
        return here, there

    for query in [q for q in QUERIES if q.strip()]:
        here, there = asyncio.run(both(query))
        assert here.ok and there.ok
        assert there == here  # output text, doc ids and scores


def test_retriever_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRIEVER_URL_ENV_VAR, "http://127.0.0.1:9/")
    tool = SearchTool()
    assert tool.remote is not None and tool.remote.endpoint == "http://127.0.0.1:9/retrieve"
    assert SearchTool(retriever_url="").remote is None
    with pytest.raises(ValueError):
        SearchTool(retriever_url="127.0.0.1:9")


CHILD = """
import asyncio, json, sys
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.search import SearchTool

url, first = sys.argv[1], int(sys.argv[2])
tool = SearchTool(retriever_url=url)

async def main():
    queries = [f"Vendrel{i} Ostrakon" for i in range(first, 40, 8)]
    results = await asyncio.gather(*(tool.run({"query": q}, ToolContext()) for q in queries))
    return [r.metadata["doc_ids"][0] if r.ok else r.error for r in results]

print(json.dumps(asyncio.run(main())))
"""


def test_eight_processes_share_one_server(corpus: Corpus) -> None:
    with start_retriever_server(corpus, "127.0.0.1", 0) as handle:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, handle.url, str(first)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for first in range(8)
        ]
        outputs = [child.communicate(timeout=60) for child in children]
        for first, (child, (out, err)) in enumerate(zip(children, outputs, strict=True)):
            assert child.returncode == 0, err
            assert json.loads(out) == [f"doc{i}" for i in range(first, 40, 8)]
        stats = handle.stats.as_dict()
    assert stats["requests"] == 40 and stats["queries"] == 40


def test_server_down_gives_a_failed_result_after_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    tool = SearchTool(retriever_url=url, max_retries=2)
    result = asyncio.run(tool.run({"query": "anything"}, ToolContext()))
    assert not result.ok
    assert f"retriever at {url} unreachable after 3 tries" in (result.error or "")


class ScriptedHandler(BaseHTTPRequestHandler):
    """Answers POSTs with the next (status, body) of the server's script; counts calls."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        server: Any = self.server
        status, body = server.script[min(server.calls, len(server.script) - 1)]
        server.calls += 1
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedHandler)
    server.calls = 0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


GOOD = json.dumps({"result": [[{"document": {"id": 1, "contents": "T\nbody"}, "score": 2.5}]]})


@pytest.mark.parametrize(
    ("script", "calls", "outcome"),
    [
        ([(503, "busy"), (500, "oops"), (200, GOOD)], 3, [(Document("1", "T", "body"), 2.5)]),
        ([(503, "busy")], 3, "unreachable after 3 tries (last: HTTP 503: busy)"),
        ([(400, '{"error": "bad topk"}')], 1, "rejected the request: HTTP 400: bad topk"),
        ([(200, "<html>")], 1, "non-JSON"),
        ([(200, '{"result": []}')], 1, "malformed answer: 0 result lists for 1 queries"),
        ([(200, '{"result": [[{"document": {"id": 1}}]]}')], 1, "malformed answer"),
        (
            [(200, '{"result": [[{"document": {"id": 1, "contents": "a"}, "score": "x"}]]}')],
            1,
            "score",
        ),
    ],
)
def test_remote_client_retries_and_rejects_garbage(
    scripted: Any, script: list, calls: int, outcome: Any
) -> None:
    scripted.script = script
    port = scripted.server_address[1]
    retriever = RemoteRetriever(f"http://127.0.0.1:{port}/retrieve", max_retries=2, backoff_s=0.01)
    if isinstance(outcome, list):
        assert asyncio.run(retriever.search("q", 1)) == outcome
    else:
        with pytest.raises(RetrieverError, match=outcome.replace("(", r"\(").replace(")", r"\)")):
            asyncio.run(retriever.search("q", 1))
    assert scripted.calls == calls


def test_remote_client_timeout_is_retried(scripted: Any) -> None:
    scripted.script = [(200, GOOD)]
    original = ScriptedHandler.do_POST

    def slow(self: ScriptedHandler) -> None:
        time.sleep(0.5)
        original(self)

    ScriptedHandler.do_POST = slow  # type: ignore[method-assign]
    try:
        retriever = RemoteRetriever(
            f"http://127.0.0.1:{scripted.server_address[1]}",
            timeout_s=0.1,
            max_retries=1,
            backoff_s=0,
        )
        with pytest.raises(RetrieverUnavailable, match=r"after 2 tries \(last: timed out"):
            asyncio.run(retriever.search("q", 1))
    finally:
        ScriptedHandler.do_POST = original  # type: ignore[method-assign]


# -- the on-disk index cache ------------------------------------------------------------------------
def big_corpus(n: int = 4000) -> Corpus:
    words = [f"w{i}" for i in range(3000)]
    return Corpus.from_documents(
        Document(f"b{i}", f"Title {i}", " ".join(words[(i * 7 + j * 13) % 3000] for j in range(60)))
        for i in range(n)
    )


def test_index_saved_then_loaded_from_disk_gives_identical_results(tmp_path: Path) -> None:
    corpus = big_corpus()
    started = time.perf_counter()
    directory, built = build_index(corpus, tmp_path)
    build_s = time.perf_counter() - started
    assert built and directory == tmp_path / corpus.corpus_id
    started = time.perf_counter()
    loaded = load_index(corpus, directory)
    load_s = time.perf_counter() - started
    assert load_s < build_s / 3
    queries = ["Title 17", "w5 w77 w912", "w2999", "nothing here", "", "title w1 w2 w3 w4"]
    assert loaded.search_batch(queries, 10) == BM25Index(corpus).search_batch(queries, 10)
    assert load_index(corpus, directory, mmap=True).search_batch(queries, 5) == (
        loaded.search_batch(queries, 5)
    )
    assert build_index(corpus, tmp_path) == (directory, False)


def test_load_or_build_reuses_the_disk_copy_and_the_process_cache(
    tmp_path: Path, corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_index_cache()
    first = load_or_build_index(corpus, tmp_path)
    assert get_index(corpus) is first and load_or_build_index(corpus, tmp_path) is first
    assert (index_dir(corpus, tmp_path) / index_store.META_FILE).exists()
    clear_index_cache()

    class NoBuilding(BM25Index):
        def __init__(self, corpus: Corpus) -> None:
            raise AssertionError("the index should have been loaded from disk")

    monkeypatch.setattr(index_store, "BM25Index", NoBuilding)
    second = load_or_build_index(corpus, tmp_path)
    assert second is not first and get_index(corpus) is second
    assert second.search_batch(QUERIES, 3) == first.search_batch(QUERIES, 3)
    clear_index_cache()


def test_mismatched_or_broken_cache_is_rebuilt(tmp_path: Path, corpus: Corpus) -> None:
    directory = save_index(BM25Index(corpus), tmp_path / "idx")
    other = Corpus.from_documents(DOCS[:5])
    with pytest.raises(IndexStoreError, match="does not match"):
        load_index(other, directory)
    with pytest.raises(IndexStoreError, match="no index metadata"):
        load_index(corpus, tmp_path / "missing")
    (directory / index_store.META_FILE).write_text("{broken", encoding="utf-8")
    rebuilt = save_index(BM25Index(corpus), directory)
    assert load_index(corpus, rebuilt).search("Vendrel3", 1)[0][0].doc_id == "doc3"


def test_corpus_without_tokens_round_trips(tmp_path: Path) -> None:
    corpus = Corpus.from_documents([Document("a", "", "!!")])
    directory = save_index(BM25Index(corpus), tmp_path / "empty")
    assert load_index(corpus, directory).search("anything", 3) == []


def test_default_cache_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(index_store.CACHE_ENV_VAR, str(tmp_path))
    assert index_store.default_cache_dir() == tmp_path / "indexes"


# -- command line -------------------------------------------------------------------------------------
def write_corpus(path: Path) -> Path:
    lines = [json.dumps({"id": d.doc_id, "contents": d.contents}) for d in DOCS[:20]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_cli_build_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus_path = write_corpus(tmp_path / "wiki.jsonl")
    assert main(["build-index", "--corpus", str(corpus_path), "--out", str(tmp_path / "c")]) == 0
    assert capsys.readouterr().out.startswith("built: ")
    assert main(["build-index", "--corpus", str(corpus_path), "--out", str(tmp_path / "c")]) == 0
    assert capsys.readouterr().out.startswith("already cached: ")
    (cached,) = (tmp_path / "c").iterdir()
    assert (cached / index_store.META_FILE).exists()


def test_cli_serve_retriever(tmp_path: Path) -> None:
    corpus_path = write_corpus(tmp_path / "wiki.jsonl")
    command = [sys.executable, "-m", "agentflow_env.cli", "serve-retriever", "--corpus"]
    command += [str(corpus_path), "--port", "0", "--cache-dir", str(tmp_path / "c")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving 20 documents at http://127.0.0.1:"), process.stderr
        url = line.split(" at ")[1].strip()
        status, body = post(url, {"queries": ["Vendrel4 Ostrakon"], "topk": 1})
        assert status == 200 and body["result"][0][0]["id"] == "doc4"
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
    assert any((tmp_path / "c").iterdir())  # the index was cached on the way
