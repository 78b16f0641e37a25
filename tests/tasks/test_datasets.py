"""Dataset and corpus loaders: every supported format, split/id rules, and errors naming lines."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.retrieval.corpus import Corpus, Document, load_corpus_jsonl, resolve_corpus
from agentflow_env.tasks.datasets import DatasetError, DatasetTaskSource, load_tasks

QA_ROWS: list[dict[str, Any]] = [
    {
        "id": "test_0",
        "question": "Who built the Eiffel Tower?",
        "golden_answers": ["Gustave Eiffel", "Eiffel"],
    },
    {"id": "test_1", "question": "Capital of France?", "golden_answers": ["Paris"], "hops": 2},
    {"id": "test_2", "question": "Year the tower opened?", "golden_answers": [1889]},
]
CORPUS_ROWS: list[dict[str, Any]] = [
    {
        "id": "1",
        "contents": '"Eiffel Tower"\nWrought-iron tower in Paris, built by Gustave Eiffel.',
    },
    {"id": "2", "contents": "Paris\nCapital of France."},
    {"id": 3, "title": "Zürich", "text": "Largest city in Switzerland."},
    {"contents": "No newline title"},
]


def write_jsonl(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    for number, text in (raw_lines or {}).items():
        lines.insert(number - 1, text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_flashrag_jsonl(tmp_path: Path) -> None:
    corpus = Corpus.from_documents([Document("d", "t", "x")])
    tasks = load_tasks(write_jsonl(tmp_path / "nq_test.jsonl", QA_ROWS), corpus=corpus)
    assert [t.task_id for t in tasks] == ["test_0", "test_1", "test_2"]
    assert tasks[0].question == "Who built the Eiffel Tower?"
    assert tasks[0].gold_answers == ("Gustave Eiffel", "Eiffel")
    assert tasks[2].gold_answers == ("1889",)
    assert [t.hops for t in tasks] == [1, 2, 1]
    assert all(t.kind == "qa" and t.split == "test" and t.corpus is corpus for t in tasks)
    assert tasks[0].metadata["location"] == "line 1"


def test_agentflow_json_list_and_mapping(tmp_path: Path) -> None:
    rows = [
        {"pid": "7", "query": "What is 6 times 7?", "answer": "42"},
        {"pid": 8, "question": "Name a prime.", "answer": ["2", 3, " 5 ", ""]},
    ]
    listed = tmp_path / "data.json"
    listed.write_text(json.dumps(rows), encoding="utf-8")
    tasks = load_tasks(listed, split="dev")
    assert [(t.task_id, t.question, t.gold_answers) for t in tasks] == [
        ("7", "What is 6 times 7?", ("42",)),
        ("8", "Name a prime.", ("2", "3", "5")),
    ]
    assert {t.split for t in tasks} == {"dev"}
    mapping = tmp_path / "by_pid.json"
    mapping.write_text(json.dumps({"a": {"query": "Q?", "answer": "A"}}), encoding="utf-8")
    assert load_tasks(mapping)[0].task_id == "a"


def test_parquet_including_search_r1_layout(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    rows = [{**row, "golden_answers": [str(a) for a in row["golden_answers"]]} for row in QA_ROWS]
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = load_tasks(path)
    assert [t.gold_answers for t in tasks] == [("Gustave Eiffel", "Eiffel"), ("Paris",), ("1889",)]
    assert {t.split for t in tasks} == {"train"}  # from the file name
    r1 = tmp_path / "r1.bin"  # no extension: sniffed from the PAR1 magic
    r1_rows = [{"question": "Q?", "reward_model": {"ground_truth": {"target": ["x", "y"]}}}]
    pq.write_table(pa.Table.from_pylist(r1_rows), r1)
    (task,) = load_tasks(r1)
    assert task.gold_answers == ("x", "y") and task.task_id == "r1-0"


def test_format_sniffing_gzip_split_field_and_limit(tmp_path: Path) -> None:
    as_json = write_jsonl(tmp_path / "lines.json", QA_ROWS)  # JSONL content, .json name
    assert len(load_tasks(as_json)) == 3
    gz = tmp_path / "dev.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as out:
        out.write("\n".join(json.dumps(r) for r in QA_ROWS))
    tasks = load_tasks(gz, limit=2)
    assert [t.task_id for t in tasks] == ["test_0", "test_1"]
    assert {t.split for t in tasks} == {"dev"}
    with_split = write_jsonl(tmp_path / "x.jsonl", [{**QA_ROWS[0], "split": "train"}])
    assert load_tasks(with_split)[0].split == "train"
    with pytest.raises(DatasetError, match="no records of split 'test'"):
        load_tasks(with_split, split="test")  # a split filters records, never relabels them


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"id": "x", "question": "Q", ', "line 2: invalid JSON"),
        ('{"id": "x", "golden_answers": ["a"]}', "line 2: missing or empty question"),
        ('{"question": "   ", "golden_answers": ["a"]}', "line 2: missing or empty question"),
        ('{"question": "Q", "golden_answers": {"a": 1}}', "line 2: 'golden_answers' must be"),
        ('{"question": "Q", "golden_answers": [null]}', "line 2: 'golden_answers' must be"),
        ('{"question": "Q", "golden_answers": [true]}', "line 2: 'golden_answers' must be"),
        ('{"question": "Q", "golden_answers": []}', "line 2: 'golden_answers' holds no"),
        ('{"question": "Q"}', "line 2: missing gold answers"),
        ('{"question": "Q", "answer": "a", "hops": 0}', "line 2: 'hops' must be"),
        ('["not", "an", "object"]', "line 2: expected a JSON object"),
    ],
)
def test_malformed_jsonl_lines_name_file_and_line(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS[:2], raw_lines={2: bad_line})
    with pytest.raises(DatasetError, match=message) as error:
        load_tasks(path)
    assert str(path) in str(error.value)


def test_malformed_json_list_and_files(tmp_path: Path) -> None:
    listed = tmp_path / "data.json"
    listed.write_text(
        json.dumps([{"query": "Q", "answer": "a"}, {"query": "Q2"}]), encoding="utf-8"
    )
    with pytest.raises(DatasetError, match=r"record 1 \(0-based\): missing gold answers"):
        load_tasks(listed)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n{"query": "Q", "answer": "a"},\n{oops}\n]', encoding="utf-8")
    with pytest.raises(DatasetError, match="line 3: invalid JSON"):
        load_tasks(broken)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no records"):
        load_tasks(empty)
    with pytest.raises(DatasetError, match="cannot open"):
        load_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError):
        load_tasks(empty, limit=0)


def test_corpus_jsonl_both_layouts(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS)
    corpus = load_corpus_jsonl(path)
    docs = corpus.documents
    assert [d.doc_id for d in docs] == ["1", "2", "3", "3"]  # the last has no id: its index
    assert docs[0].title == '"Eiffel Tower"'
    assert docs[0].contents == CORPUS_ROWS[0]["contents"]  # round trip for the server
    assert (docs[2].title, docs[2].text) == ("Zürich", "Largest city in Switzerland.")
    assert (docs[3].title, docs[3].text) == ("No newline title", "")
    assert load_corpus_jsonl(path).corpus_id == corpus.corpus_id


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "line 3: invalid JSON"),
        ('{"id": "x", "contents": 5}', "line 3: 'contents' must be a string"),
        ('{"id": "x", "title": "T"}', "line 3: expected 'contents'"),
        ('{"id": [1], "contents": "a\\nb"}', "line 3: 'id' must be"),
    ],
)
def test_malformed_corpus_lines(tmp_path: Path, bad_line: str, message: str) -> None:
    path = write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS[:2], raw_lines={3: bad_line})
    with pytest.raises(DatasetError, match=message):
        load_corpus_jsonl(path)


def test_dataset_task_source_samples_and_shares_the_corpus(tmp_path: Path) -> None:
    corpus_path = write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS)
    data = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS)
    source = DatasetTaskSource(data, corpus=corpus_path)
    assert len(source) == 3
    assert source.corpus is resolve_corpus(str(corpus_path))  # loaded once per process
    assert DatasetTaskSource(data, corpus=corpus_path).corpus is source.corpus
    draws = [source.sample(np.random.default_rng(5)).task_id for _ in range(3)]
    assert len(set(draws)) == 1
    seen = {source.sample(np.random.default_rng(seed)).task_id for seed in range(40)}
    assert seen == {"test_0", "test_1", "test_2"}
    assert all(t.corpus is source.corpus for t in source.tasks)


def test_env_runs_a_dataset_task_with_the_rule_modules(tmp_path: Path) -> None:
    source = DatasetTaskSource(
        write_jsonl(tmp_path / "qa.jsonl", QA_ROWS[:1]),
        corpus=write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS),
    )
    env = AgentFlowEnv(task_source=source, max_turns=3)
    try:
        observation, _ = env.reset(seed=0)
        assert "Who built the Eiffel Tower?" in observation["text"]
        action = "Justification: look it up\nContext: Eiffel Tower\nSub-Goal: find the builder\nTool Name: Search"
        _, reward, terminated, _, _ = env.step(action)
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_gym_make_with_dataset_and_corpus_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentflow_env.retrieval.bm25 import clear_index_cache

    monkeypatch.setenv("AGENTFLOW_ENV_CACHE", str(tmp_path / "cache"))
    clear_index_cache()  # so the index is made (and saved) by this env, not found in memory
    qa = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS[:1])
    wiki = write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS)
    env = gym.make("AgentFlow-Search-v0", dataset=str(qa), corpus=str(wiki), max_turns=2)
    try:
        env.reset(seed=0)
        action = "Context: Eiffel Tower\nSub-Goal: find the builder\nTool Name: Search"
        _, reward, terminated, _, info = env.step(action)
        assert terminated and reward == 1.0 and info["success"]
        assert list((tmp_path / "cache" / "indexes").iterdir()), "the index was cached on disk"
    finally:
        env.close()


def test_env_search_through_a_retriever_server(tmp_path: Path) -> None:
    from agentflow_env.retrieval.server import start_retriever_server

    qa = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS[:1])
    corpus = load_corpus_jsonl(write_jsonl(tmp_path / "wiki.jsonl", CORPUS_ROWS))
    with start_retriever_server(corpus) as server:
        env = gym.make(
            "AgentFlow-Search-v0", dataset=str(qa), retriever_url=server.url, max_turns=2
        )
        try:
            env.reset(seed=0)
            action = "Context: Eiffel Tower\nSub-Goal: find the builder\nTool Name: Search"
            _, reward, terminated, _, _ = env.step(action)
            assert terminated and reward == 1.0
        finally:
            env.close()
    with pytest.raises(ValueError, match="corpus= goes with dataset="):
        gym.make("AgentFlow-Search-v0", corpus=str(tmp_path / "wiki.jsonl"))


@pytest.mark.parametrize(
    ("strip", "expected"),
    [(True, ["Who?", "Where is it?"]), (False, ["  Who?\n", "Where is it? "])],
    ids=["own", "verbatim"],
)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_questions_are_stripped_unless_kept_verbatim(
    tmp_path: Path, fmt: str, strip: bool, expected: list[str]
) -> None:
    records = [
        {"id": "a", "question": "  Who?\n", "answers": ["Ada"]},
        {"pid": "b", "query": "Where is it? ", "question": "Where?", "answer": "Here"},
    ]
    path = tmp_path / f"qa.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, records)
    else:
        path.write_text(json.dumps(records), "utf-8")
    tasks = load_tasks(path, strip_questions=strip)
    assert [task.question for task in tasks] == expected
    assert [t.question for t in DatasetTaskSource(path, strip_questions=strip).tasks] == expected
