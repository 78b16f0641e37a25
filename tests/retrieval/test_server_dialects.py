"""serve-retriever answers its peers' search tools in their own shapes (docs/retrieval_scale.md).

A real ``agentflow-env serve-retriever`` process on 127.0.0.1 answers: SkyRL-gym's own
``call_search_api`` and ``SearchToolGroup`` (JSON ``query``), verl-agent's request (its search
tool is a copy of SkyRL-gym's), GEM's (MessagePack ``query``), each read as that client reads
it, and the results equal the project's ``RemoteRetriever``'s for the same queries.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgpack
import pytest
from skyrl_gym.tools import search

from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.retrieval.remote import RemoteRetriever
from agentflow_env.retrieval.server import MAX_TOPK, start_retriever_server

DOCS = [
    Document(f"d{i}", f"Marrow{i} Keep", f"Marrow{i} Keep stands in {town}, built in {1700 + i}.")
    for i, town in enumerate(["Zürich", "Quito", "Oslo", "Accra", "Lima", "Kyoto"] * 3)
]
QUERIES = ["Marrow4 Keep", "built 1707 Oslo", "Zürich", "qqq nothing matches"]
Item = tuple[str, str, float | None]  # a hit as every client sees it: id, contents, score


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``agentflow-env serve-retriever`` over ``DOCS``; its base URL."""
    folder = tmp_path_factory.mktemp("dialects")
    corpus = folder / "wiki.jsonl"
    lines = [json.dumps({"id": d.doc_id, "contents": d.contents}) for d in DOCS]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "agentflow_env.cli", "serve-retriever", "--corpus"]
    command += [str(corpus), "--port", "0", "--cache-dir", str(folder / "cache")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving "), process.stderr and process.stderr.read()
        yield line.split(" at ")[1].strip().removesuffix("/retrieve")
    finally:
        process.terminate()
        process.wait(timeout=10)


def project_items(url: str, topk: int) -> dict[str, list[Item]]:
    """What the project's own client gets for each of ``QUERIES``."""

    async def search_all() -> list[Any]:
        retriever = RemoteRetriever(url)
        try:
            return await asyncio.gather(*(retriever.search(q, topk) for q in QUERIES))
        finally:
            await retriever.aclose()

    found = asyncio.run(search_all())
    return {
        query: [(doc.doc_id, doc.contents, score) for doc, score in hits]
        for query, hits in zip(QUERIES, found, strict=True)
    }


def items_of(hits: list[dict[str, Any]]) -> list[Item]:
    return [(h["document"]["id"], h["document"]["contents"], h.get("score")) for h in hits]


def send(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """One ``POST /retrieve`` with exactly ``body`` and ``headers`` (http.client adds only
    ``Host``, ``Accept-Encoding`` and ``Content-Length``): status, Content-Type, body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", "/retrieve", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


def post_json(url: str, payload: Any) -> tuple[int, Any]:
    status, _, body = send(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    return status, json.loads(body)


# -- each client's own shape ----------------------------------------------------------------------
@pytest.mark.parametrize("topk", [1, 3, 5])
def test_skyrl_gym_search_tool_gets_the_project_clients_results(url: str, topk: int) -> None:
    expected = project_items(url, topk)
    tool = search.SearchToolGroup(search_url=url + "/retrieve", topk=topk, log_requests=False)
    for query in QUERIES:
        answer, error = search.call_search_api(url + "/retrieve", query, topk, log_requests=False)
        assert error is None and answer is not None
        (hits,) = answer["result"]
        assert items_of(hits) == expected[query]
        # The tool's own text, from SkyRL-gym's formatter fed with the project client's hits.
        documents = [{"document": {"contents": contents}} for _, contents, _ in expected[query]]
        assert tool.search(query) == json.dumps({"result": search._passages2string(documents)})
    assert "Doc 1: Marrow4 Keep" in tool.search("Marrow4 Keep")


def test_skyrl_gym_without_scores_still_reads_documents(url: str) -> None:
    expected = [(i, c, None) for i, c, _ in project_items(url, 2)["Zürich"]]
    answer, error = search.call_search_api(
        url + "/retrieve", "Zürich", 2, return_scores=False, log_requests=False
    )
    assert error is None and answer is not None
    (hits,) = answer["result"]
    assert items_of(hits) == expected  # no score asked, none given
    assert all(set(hit) == {"document"} for hit in hits)
    assert search._passages2string(hits).startswith(f"Doc 1: {expected[0][1]}")


def test_verl_agent_request_is_answered_as_its_parser_reads(url: str) -> None:
    """verl-agent's search env posts (JSON, these headers) and parses as SkyRL-gym's tool: its
    ``third_party/skyrl_gym/tools/search.py`` is a copy. Needs no SkyRL-gym installed."""
    expected = project_items(url, 3)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    for query in QUERIES:
        payload = {"query": query, "topk": 3, "return_scores": True}
        status, kind, body = send(url, json.dumps(payload).encode(), headers)
        assert status == 200 and kind.startswith("application/json")
        result = json.loads(body)["result"]
        assert len(result) == 1  # one list of hits: the one query's
        assert items_of(result[0]) == expected[query]


def test_gem_msgpack_request_gets_a_msgpack_list_of_hits(url: str) -> None:
    """GEM's ``SearchTool._search``: a MessagePack body, no Content-Type; it reads
    ``unpack(reply)["result"]`` as the list of ``{"document": {"contents"}}`` hits itself."""
    expected = project_items(url, 2)
    for query in QUERIES:
        payload = {"query": query, "topk": 2, "return_scores": True}
        # GEM encodes with msgspec; msgpack.packb gives the same bytes for this object.
        status, kind, body = send(url, msgpack.packb(payload), {})
        assert status == 200 and kind == "application/msgpack"
        hits = msgpack.unpackb(body)["result"]
        assert items_of(hits) == expected[query]
        titles = [hit["document"]["contents"].split("\n")[0] for hit in hits]
        assert titles == [contents.split("\n")[0] for _, contents, _ in expected[query]]
    status, _, body = send(url, msgpack.packb({"query": "Marrow2 Keep", "topk": 1}), {})
    assert status == 200 and msgpack.unpackb(body)["result"][0] == {
        "document": {"id": "d2", "contents": DOCS[2].contents}
    }


def test_search_r1_shape_is_unchanged(url: str) -> None:
    expected = project_items(url, 3)
    status, body = post_json(url, {"queries": QUERIES, "topk": 3, "return_scores": True})
    assert status == 200
    assert [items_of(hits) for hits in body["result"]] == [expected[q] for q in QUERIES]
    status, body = post_json(url, {"queries": QUERIES[:1], "topk": 1})
    assert (status, body) == (200, {"result": [[{"id": "d4", "contents": DOCS[4].contents}]]})


# -- what is refused, and why ---------------------------------------------------------------------
def test_an_empty_query_is_searched_like_an_empty_queries_item(url: str) -> None:
    status, single = post_json(url, {"query": "", "return_scores": True})
    assert status == 200
    assert (200, single) == post_json(url, {"queries": [""], "return_scores": True})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"queries": ["a"], "query": "a"}, "'queries' (a list of strings) or 'query'"),
        ({"queries": [], "query": "a"}, "not both"),
        ({"query": 3}, "'query' must be a string"),
        ({"query": ["a", "b"]}, "'query' must be a string"),
        ({"query": None}, "'query' must be a string"),
        ({"query": "a", "topk": MAX_TOPK + 1}, "'topk' must be an integer from 0 to"),
        ({"query": "a", "topk": -1}, "'topk'"),
        ({"query": "a", "return_scores": "yes"}, "'return_scores'"),
        ({"topk": 3}, "'queries' must be a list of strings (or 'query' one string)"),
    ],
)
def test_bad_requests_get_400_with_a_reason(url: str, payload: Any, message: str) -> None:
    status, body = post_json(url, payload)
    assert status == 400
    assert message in body["error"]


def test_bad_msgpack_requests_get_400(url: str) -> None:
    cases = [
        (msgpack.packb({"queries": ["a"]}), "needs a 'query' string"),
        (msgpack.packb({"query": b"bytes"}), "'query' must be a string"),
        (msgpack.packb({"query": "a", "queries": ["a"]}), "not both"),
        (msgpack.packb({"query": "a", "topk": 5000}), "'topk'"),
        (b"\x81\xa5query", "not valid MessagePack"),  # cut short
        (b"\x81\xc1\xc1", "not valid MessagePack"),  # a byte MessagePack never uses
        (b"\x81" + msgpack.packb([1]) + b"\x01", "not valid MessagePack"),  # a list as a key
    ]
    for body, message in cases:
        status, kind, answer = send(url, body, {})
        assert (status, kind.split(";")[0]) == (400, "application/json"), body
        assert message in json.loads(answer)["error"], body


def test_msgpack_without_the_package_gets_415(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import msgpack raises ImportError
    with start_retriever_server(Corpus.from_documents(DOCS), "127.0.0.1", 0) as handle:
        status, _, answer = send(handle.url, b"\x81\xa5query\xa1a", {})
        assert status == 415
        assert "pip install 'agentflow-env[gem]'" in json.loads(answer)["error"]
        status, body = post_json(handle.url, {"query": "Marrow1 Keep", "topk": 1})
        assert status == 200 and body["result"][0][0]["document"]["id"] == "d1"


def test_the_docs_table_names_these_tests() -> None:
    table = (Path(__file__).parents[2] / "docs" / "retrieval_scale.md").read_text("utf-8")
    for test in (
        test_skyrl_gym_search_tool_gets_the_project_clients_results,
        test_verl_agent_request_is_answered_as_its_parser_reads,
        test_gem_msgpack_request_gets_a_msgpack_list_of_hits,
        test_search_r1_shape_is_unchanged,
    ):
        assert f"`{test.__name__}`" in table, test.__name__
