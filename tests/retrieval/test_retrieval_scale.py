"""Corpus files at scale: DPR TSV and BOM readers, the streaming BM25 build, the memory-mapped
document store and file index, and when its cache is reused, rebuilt or left alone."""

from __future__ import annotations

import gzip
import json
import os
import random
import threading
from pathlib import Path

import bm25s
import numpy as np
import pytest

from agentflow_env.base.errors import DatasetError
from agentflow_env.retrieval import bm25_writer, file_identity, file_index
from agentflow_env.retrieval.bm25 import BM25Index
from agentflow_env.retrieval.bm25_writer import BM25Writer
from agentflow_env.retrieval.corpus import (
    Corpus,
    Document,
    iter_corpus_file,
    load_corpus_file,
    load_corpus_jsonl,
)
from agentflow_env.retrieval.corpus_reader import corpus_format
from agentflow_env.retrieval.doc_store import DATA_FILE, DocStore, DocStoreWriter
from agentflow_env.retrieval.file_index import (
    CorpusFileIndex,
    build_corpus_index,
    build_corpus_index_command,
    clear_opened_indexes,
    load_corpus_index,
    open_corpus_index,
)
from agentflow_env.retrieval.index_store import META_FILE, IndexStoreError

WORDS = [f"w{i}" for i in range(300)] + ["Zürich", "ΟΔΟΣ", "naïve", "café", "x_y", "1889"]
QUERIES = ["w1 w2", "zürich naïve", "T5 w7 w9 w11", "unknownword", "", "w3 w3 w3", "ΟΔΟΣ 1889"]


def make_docs(n: int = 400, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    docs = [
        Document(
            f"d{i}",
            f"T{i % 37} {rng.choice(WORDS)}",
            " ".join(rng.choices(WORDS, k=rng.randint(0, 40))),
        )
        for i in range(n)
    ]
    return [*docs, Document("empty", "", ""), Document("punct", "", "!! ??")]


def write_jsonl(path: Path, docs: list[Document], bom: bool = False) -> Path:
    text = "".join(json.dumps({"id": d.doc_id, "contents": d.contents}) + "\n" for d in docs)
    data = ("\ufeff" + text if bom else text).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def dpr_field(value: str) -> str:
    """CSV quoting as DPR's psgs_w100.tsv has it: quoted when it holds a quote."""
    return '"' + value.replace('"', '""') + '"' if '"' in value else value


def write_tsv(path: Path, docs: list[Document], header: str = "id\ttext\ttitle") -> Path:
    lines = [header] if header else []
    lines += [f"{d.doc_id}\t{dpr_field(d.text)}\t{dpr_field(d.title)}" for d in docs]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.fixture(autouse=True)
def fresh_opened() -> None:
    clear_opened_indexes()


# -- reading corpus files -------------------------------------------------------------------------
DPR_ROWS = (
    "id\ttext\ttitle\n"
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses."\tAaron\n'
    "2\tSo Moses went with Aaron to the Pharaoh.\tAaron\n"
    '3\tThe "Elder" ruled; text with \'single\' quotes.\t"Aaron (name)"\n'
)


@pytest.mark.parametrize("name", ["psgs.tsv", "psgs.tsv.gz"])
def test_dpr_tsv_reads_ids_titles_and_texts(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    data = DPR_ROWS.encode("utf-8")
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    docs = load_corpus_file(path).documents
    assert [d.doc_id for d in docs] == ["1", "2", "3"]
    assert docs[0].title == "Aaron" and docs[0].text.startswith('Aaron Aaron ( or ; "Ahärôn") is')
    assert docs[2].text == "The \"Elder\" ruled; text with 'single' quotes."
    assert docs[2].title == "Aaron (name)"
    assert load_corpus_jsonl(path).documents == docs  # the old name reads every layout


def test_tsv_header_names_the_columns_and_bom_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("\ufeffTitle\tid\tText\nParis\tp1\tCapital of France.\n", encoding="utf-8")
    assert list(iter_corpus_file(path)) == [Document("p1", "Paris", "Capital of France.")]
    headerless = tmp_path / "plain.tab"
    headerless.write_text("7\tSome text.\tSome title\n", encoding="utf-8")
    assert list(iter_corpus_file(headerless)) == [Document("7", "Some title", "Some text.")]


@pytest.mark.parametrize("name", ["wiki.jsonl", "wiki.jsonl.gz", "wiki.data"])
def test_bom_jsonl_loads(tmp_path: Path, name: str) -> None:
    docs = make_docs(5)
    path = write_jsonl(tmp_path / name, docs, bom=True)
    assert load_corpus_file(path).documents == tuple(docs)
    assert corpus_format(path) == "jsonl"


def test_malformed_corpus_files_name_the_line(tmp_path: Path) -> None:
    short = tmp_path / "short.tsv"
    short.write_text("id\ttext\ttitle\n1\tfine\tT\n2\tno title column\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="line 3: expected 3 tab-separated columns"):
        load_corpus_file(short)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": 1, "contents": "a\\nb"}\n{"id": 2, "contents": "c', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"line 2: invalid JSON at column \d+ \("):
        load_corpus_file(broken)
    with pytest.raises(DatasetError, match="cannot open"):
        load_corpus_file(tmp_path / "missing.tsv")


# -- the streaming build --------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [64, bm25_writer.DEFAULT_MEMORY_BUDGET])
def test_streaming_build_writes_bm25s_arrays_identical_to_the_in_memory_index(
    tmp_path: Path, budget: int
) -> None:
    docs = make_docs()
    writer = BM25Writer(tmp_path, memory_budget_bytes=budget)  # 64 bytes: 256 term ranges
    for start in range(0, len(docs), 37):
        writer.add([d.contents for d in docs[start : start + 37]])
    stats = writer.finish()
    expected = BM25Index(Corpus.from_documents(docs)).retriever
    loaded = bm25s.BM25.load(tmp_path, mmap=True, show_progress=False)
    for name in ("data", "indices", "indptr"):
        assert loaded.scores[name].dtype == expected.scores[name].dtype
        assert np.array_equal(loaded.scores[name], expected.scores[name]), name
    assert loaded.vocab_dict == expected.vocab_dict
    assert (stats.documents, stats.vocab_size) == (len(docs), len(expected.vocab_dict) - 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(bm25_writer.BM25S_FILES)


@pytest.mark.parametrize("layout", ["tsv", "jsonl.gz"])
def test_file_index_ranks_exactly_like_the_in_memory_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    monkeypatch.setattr(file_index, "BUILD_BATCH_DOCS", 50)  # many streaming batches
    docs = make_docs()
    writer = write_tsv if layout == "tsv" else write_jsonl
    path = writer(tmp_path / f"corpus.{layout}", docs)
    index = open_corpus_index(path, tmp_path / "cache")
    memory = BM25Index(Corpus.from_documents(docs))
    for k in (1, 3, 10, len(docs) + 5):
        assert index.search_batch(QUERIES, k) == memory.search_batch(QUERIES, k)
    assert index.search("w5", 2) == memory.search("w5", 2)
    assert len(index) == len(docs) and index.corpus_id == index.facts()["corpus_id"]
    assert index.meta["content_sha256"] == file_identity.content_sha256(path)  # every byte
    assert index.search("", 3) == [] and index.search_batch([], 3) == []


def test_document_store_returns_exact_texts(tmp_path: Path) -> None:
    records = [
        ("a", "Zürich ΟΔΟΣ", "tabs\tand\nnewlines\r\n kept"),
        ("", "", ""),
        ("lone", "\ud800 surrogate", "emoji 🎉 and \x00 nul"),
        ("long", "L", "word " * 5000),
    ]
    with DocStoreWriter(tmp_path) as writer:
        writer.add(records[:1])
        writer.add([])
        writer.add(records[1:])
    store = DocStore(tmp_path, expected_count=4)
    assert [(d.doc_id, d.title, d.text) for d in store] == records
    assert store[-1].doc_id == "long" and store[np.int64(2)].title == "\ud800 surrogate"
    with pytest.raises(IndexError):
        store[4]


def test_jsonl_documents_round_trip_through_the_file_index(tmp_path: Path) -> None:
    docs = [Document("x", "Title\twith tab", "text\nwith\nlines"), Document("y", "\ud800", "z")]
    path = tmp_path / "odd.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) + "\n" for d in docs
        ),
        encoding="utf-8",
    )
    index = open_corpus_index(path, tmp_path / "cache")
    assert list(index.documents) == docs
    assert index.search("lines", 1)[0][0] == docs[0]


# -- the cache: reused, rebuilt, never the corpus read when valid -----------------------------------
def test_loading_from_the_cache_does_not_read_the_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = make_docs()
    path = write_tsv(tmp_path / "corpus.tsv", docs)
    directory, built = build_corpus_index(path, tmp_path / "cache")
    assert built and build_corpus_index(path, tmp_path / "cache") == (directory, False)
    expected = BM25Index(Corpus.from_documents(docs)).search_batch(QUERIES, 5)

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the corpus was read in full")

    monkeypatch.setattr(file_index, "iter_corpus_records", no_reading)
    monkeypatch.setattr(file_index, "content_sha256", no_reading)
    assert open_corpus_index(path, tmp_path / "cache").search_batch(QUERIES, 5) == expected
    path.unlink()  # served from the cache directory alone
    assert load_corpus_index(directory).search_batch(QUERIES, 5) == expected


def test_a_changed_corpus_gets_a_new_id_and_a_rebuild(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "corpus.tsv", make_docs())
    first = open_corpus_index(path, tmp_path / "cache")
    write_tsv(path, make_docs(seed=1))
    second = open_corpus_index(path, tmp_path / "cache")
    assert second is not first and second.corpus_id != first.corpus_id
    assert second.search_batch(QUERIES, 5) == BM25Index(
        Corpus.from_documents(make_docs(seed=1))
    ).search_batch(QUERIES, 5)


def big_corpus_bytes() -> bytes:
    """~1.5 MB: larger than the sampled chunks, so an edit can fall between them."""
    rng = random.Random(3)
    lines = ["id\ttext\ttitle"]
    lines += [f"{i}\t{' '.join(rng.choices(WORDS, k=40))}\tT{i}" for i in range(7000)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def test_an_edit_between_the_samples_is_caught_by_the_content_hash(tmp_path: Path) -> None:
    data = bytearray(big_corpus_bytes())
    sampled = {
        i
        for start in file_identity.sample_offsets(len(data))
        for i in range(start, start + file_identity.SAMPLE_BYTES)
    }
    path = tmp_path / "corpus.tsv"
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    first = open_corpus_index(path, tmp_path / "cache")
    where = next(
        i
        for i in range(len(data) // 3, len(data))
        if i not in sampled and data[i : i + 3] == b"w12"
    )
    data[where : where + 3] = b"w13"  # same size, same sampled chunks, different content
    path.write_bytes(bytes(data))
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    second = open_corpus_index(path, tmp_path / "cache")
    assert second.directory == first.directory  # same size and samples: same slot, rebuilt
    assert second.corpus_id != first.corpus_id


def test_a_touched_but_unchanged_corpus_keeps_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "corpus.tsv"
    path.write_bytes(big_corpus_bytes())
    directory, _ = build_corpus_index(path, tmp_path / "cache")
    corpus_id = load_corpus_index(directory).corpus_id
    os.utime(path, ns=(5_000_000_000, 5_000_000_000))
    assert build_corpus_index(path, tmp_path / "cache") == (directory, False)  # hashed once
    monkeypatch.setattr(file_index, "content_sha256", lambda _: pytest.fail("hashed again"))
    assert build_corpus_index(path, tmp_path / "cache") == (directory, False)
    assert open_corpus_index(path, tmp_path / "cache").corpus_id == corpus_id


@pytest.mark.parametrize(
    "damage",
    ["truncate data", "truncate documents", "overwrite documents", "drop vocab", "junk meta"],
)
def test_a_truncated_or_corrupt_cache_is_detected_and_rebuilt(tmp_path: Path, damage: str) -> None:
    docs = make_docs()
    path = write_tsv(tmp_path / "corpus.tsv", docs)
    directory, _ = build_corpus_index(path, tmp_path / "cache")
    if damage == "truncate data":
        target = directory / bm25_writer.DATA_FILE
        target.write_bytes(target.read_bytes()[:-8])
    elif damage == "truncate documents":
        target = directory / DATA_FILE
        target.write_bytes(target.read_bytes()[:-1])
    elif damage == "overwrite documents":
        target = directory / DATA_FILE
        content = bytearray(target.read_bytes())
        content[-5:] = b"XXXXX"
        target.write_bytes(bytes(content))
    elif damage == "drop vocab":
        (directory / bm25_writer.VOCAB_FILE).unlink()
    else:
        (directory / META_FILE).write_text("{broken", encoding="utf-8")
    if damage != "junk meta":
        with pytest.raises(IndexStoreError):
            load_corpus_index(directory)
    assert build_corpus_index(path, tmp_path / "cache") == (directory, True)
    expected = BM25Index(Corpus.from_documents(docs)).search_batch(QUERIES, 5)
    assert load_corpus_index(directory).search_batch(QUERIES, 5) == expected


def test_open_shares_one_index_builds_once_and_can_refuse_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_tsv(tmp_path / "corpus.tsv", make_docs())
    with pytest.raises(IndexStoreError, match="no valid index"):
        open_corpus_index(path, tmp_path / "cache", build=False)
    builds = []
    original = file_index._build
    monkeypatch.setattr(file_index, "_build", lambda *a: builds.append(1) or original(*a))
    opened: list[CorpusFileIndex] = []
    threads = [
        threading.Thread(target=lambda: opened.append(open_corpus_index(path, tmp_path / "cache")))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len({id(index) for index in opened}) == 1
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [opened[0].directory.name]


def test_corpora_without_tokens_or_documents(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "punct.tsv", [Document("a", "", "!!"), Document("b", "?", "")])
    index = open_corpus_index(path, tmp_path / "cache")
    assert len(index) == 2 and index.search("anything", 3) == []
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert len(open_corpus_index(empty, tmp_path / "cache")) == 0


def test_build_command_reports_built_then_cached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_tsv(tmp_path / "corpus.tsv.gz", make_docs(30))
    assert build_corpus_index_command(path, tmp_path / "cache") == 0
    assert capsys.readouterr().out.startswith("built: ")
    assert build_corpus_index_command(path, tmp_path / "cache") == 0
    assert capsys.readouterr().out.startswith("already cached: ")
