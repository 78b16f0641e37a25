"""Real file shapes (FlashRAG JSONL, Search-R1 Parquet, a BOM, a cut line), the split filter,
EM/F1 edge cases against the references' rules, and the oracle's refusal of unfindable golds."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env import RandomPlanner
from agentflow_env.tasks.base import Evidence, Task
from agentflow_env.tasks.datasets import DatasetError, load_tasks, question_from_prompt
from agentflow_env.tasks.oracle import (
    EvidenceAnswerSolver,
    evidence_answers,
    evidence_reader,
    findable_in_text,
)
from agentflow_env.tasks.scoring import exact_match, f1_score

# FlashRAG's QA JSONL: id, question, golden_answers (several aliases per question).
FLASHRAG_ROWS: list[dict[str, Any]] = [
    {
        "id": "test_0",
        "question": "who built the eiffel tower",
        "golden_answers": ["Gustave Eiffel", "Eiffel", "Alexandre Gustave Eiffel"],
    },
    {"id": "test_1", "question": "capital of france", "golden_answers": ["Paris"]},
    {
        "id": "test_2",
        "question": "when did the tower open",
        "golden_answers": ["1889", "31 March 1889", "March 31, 1889"],
    },
]


def jsonl_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- FlashRAG JSONL ---------------------------------------------------------------------------
def test_flashrag_jsonl_keeps_every_record_and_alias(tmp_path: Path) -> None:
    path = write(tmp_path / "nq_test.jsonl", jsonl_text(FLASHRAG_ROWS))
    tasks = load_tasks(path)
    raw = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert len(tasks) == len(raw) == 3
    assert [t.task_id for t in tasks] == [r["id"] for r in raw]
    assert [t.gold_answers for t in tasks] == [tuple(r["golden_answers"]) for r in raw]
    assert {t.split for t in tasks} == {"test"}


# -- the split filter -------------------------------------------------------------------------
SPLIT_ROWS = [
    {"id": "a", "question": "Q1?", "golden_answers": ["A1"], "split": "train"},
    {"id": "b", "question": "Q2?", "golden_answers": ["A2"], "split": "train"},
    {"id": "c", "question": "Q3?", "golden_answers": ["A3"], "split": "test"},
]


def test_dataset_split_filters_records_by_their_own_split(tmp_path: Path) -> None:
    path = write(tmp_path / "mixed.jsonl", jsonl_text(SPLIT_ROWS))
    assert [(t.task_id, t.split) for t in load_tasks(path, split="test")] == [("c", "test")]
    assert [t.task_id for t in load_tasks(path, split="train")] == ["a", "b"]
    assert [(t.task_id, t.split) for t in load_tasks(path)] == [
        ("a", "train"),
        ("b", "train"),
        ("c", "test"),
    ]
    assert [t.task_id for t in load_tasks(path, split="train", limit=1)] == ["a"]
    with pytest.raises(DatasetError, match=r"no records of split 'dev'.*'test': 1, 'train': 2"):
        load_tasks(path, split="dev")


def test_records_without_a_split_are_kept_and_labelled(tmp_path: Path) -> None:
    bare = write(tmp_path / "nq_train.jsonl", jsonl_text(FLASHRAG_ROWS))
    tasks = load_tasks(bare, split="test")  # the file name does not filter, only labels
    assert len(tasks) == 3 and {t.split for t in tasks} == {"test"}
    assert {t.split for t in load_tasks(bare)} == {"train"}
    mixed = write(tmp_path / "m.jsonl", jsonl_text([*SPLIT_ROWS, FLASHRAG_ROWS[1]]))
    assert [t.task_id for t in load_tasks(mixed, split="test")] == ["c", "test_1"]


def test_validation_dev_and_val_name_the_same_split(tmp_path: Path) -> None:
    rows = [{**SPLIT_ROWS[0], "split": "validation"}, {**SPLIT_ROWS[1], "split": "val"}]
    path = write(tmp_path / "v.jsonl", jsonl_text([*rows, SPLIT_ROWS[2]]))
    tasks = load_tasks(path, split="dev")
    assert [(t.task_id, t.split) for t in tasks] == [("a", "dev"), ("b", "dev")]


# -- BOM and a cut line -----------------------------------------------------------------------
def test_a_utf8_bom_is_skipped_in_jsonl_json_and_gzip(tmp_path: Path) -> None:
    bom = "\ufeff"
    as_jsonl = write(tmp_path / "bom.jsonl", bom + jsonl_text(FLASHRAG_ROWS))
    as_json = write(tmp_path / "bom.json", bom + json.dumps(FLASHRAG_ROWS, indent=2))
    sniffed = write(tmp_path / "bom_lines.json", bom + jsonl_text(FLASHRAG_ROWS))
    zipped = tmp_path / "bom.jsonl.gz"
    with gzip.open(zipped, "wt", encoding="utf-8") as out:
        out.write(bom + jsonl_text(FLASHRAG_ROWS))
    for path in (as_jsonl, as_json, sniffed, zipped):
        tasks = load_tasks(path)
        assert [t.task_id for t in tasks] == ["test_0", "test_1", "test_2"], path.name
        assert tasks[0].gold_answers == tuple(FLASHRAG_ROWS[0]["golden_answers"])


def test_a_truncated_jsonl_line_names_file_line_and_column(tmp_path: Path) -> None:
    cut = '{"id": "test_2", "question": "when did it open", "golden_answers": ["18'
    path = write(tmp_path / "cut.jsonl", jsonl_text(FLASHRAG_ROWS[:2]) + cut)
    column = cut.index('"18') + 1  # 1-based: where the unterminated string starts
    with pytest.raises(DatasetError) as error:
        load_tasks(path)
    message = str(error.value)
    assert str(path) in message
    assert f"line 3: invalid JSON at column {column} (Unterminated string" in message


def test_a_broken_json_document_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "data.json", '[\n  {"query": "Q", "answer": "a"},\n  {oops}\n]')
    with pytest.raises(DatasetError, match=r"data\.json, line 3: invalid JSON at column 4 "):
        load_tasks(path)


# -- Search-R1 Parquet ------------------------------------------------------------------------
# The shape of Search-R1's processed data (scripts/data_process/nq_search.py): the question, made
# to end in "?", is wrapped in an instruction that ends "Question: {question}\n".
INSTRUCTION = (
    "Answer the question below. Think inside <think> and </think>, search with <search> query "
    "</search> to get results between <information> and </information>, and give the final "
    "answer inside <answer> and </answer>, for example <answer> Beijing </answer>. "
)


def search_r1_rows(with_question: bool) -> list[dict[str, Any]]:
    rows = []
    for index, source in enumerate(FLASHRAG_ROWS):
        question = source["question"] + "?"
        row: dict[str, Any] = {
            "data_source": "nq",
            "prompt": [{"role": "user", "content": f"{INSTRUCTION}Question: {question}\n"}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": source["golden_answers"]}},
            "extra_info": {"split": "test" if index else "train", "index": index},
        }
        if with_question:  # datasets.map keeps the source columns beside the new ones
            row = {**source, "question": question, **row}
        rows.append(row)
    return rows


@pytest.mark.parametrize("with_question", [True, False])
def test_search_r1_parquet_with_and_without_a_question_column(
    tmp_path: Path, with_question: bool
) -> None:
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(search_r1_rows(with_question)), path)
    assert ("question" in pq.read_schema(path).names) is with_question
    tasks = load_tasks(path)
    assert len(tasks) == pq.ParquetFile(path).metadata.num_rows == 3
    assert [t.question for t in tasks] == [r["question"] + "?" for r in FLASHRAG_ROWS]
    assert [t.gold_answers for t in tasks] == [tuple(r["golden_answers"]) for r in FLASHRAG_ROWS]
    expected_ids = (
        ["test_0", "test_1", "test_2"] if with_question else ["test-0", "test-1", "test-2"]
    )
    assert [t.task_id for t in tasks] == expected_ids
    assert [t.split for t in tasks] == ["train", "test", "test"]  # from extra_info.split
    assert [t.question for t in load_tasks(path, split="train")] == [tasks[0].question]
    assert tasks[0].metadata["data_source"] == "nq"


def test_question_from_prompt_reads_the_templates_and_plain_chats() -> None:
    rag = "Answer with the context. Question: Who won? Context: Doc 1(Title: A) text\nDoc 2 \n"
    assert question_from_prompt([{"role": "user", "content": rag}]) == "Who won?"
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Question: an earlier turn?\n"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "  What is the tallest tower?  "},
    ]
    assert question_from_prompt(chat) == "What is the tallest tower?"
    assert question_from_prompt("Question: plain text prompt?\n") == "plain text prompt?"
    assert question_from_prompt([{"role": "assistant", "content": "Question: x"}]) is None
    assert question_from_prompt([{"role": "user", "content": "Question:   \n"}]) is None
    assert question_from_prompt(None) is None


def test_a_prompt_without_a_question_is_an_error_naming_the_record(tmp_path: Path) -> None:
    path = tmp_path / "r1.parquet"
    row = {**search_r1_rows(False)[0], "prompt": [{"role": "system", "content": "hi"}]}
    pq.write_table(pa.Table.from_pylist([search_r1_rows(False)[1], row]), path)
    with pytest.raises(DatasetError, match=r"record 1 \(0-based\): missing or empty question"):
        load_tasks(path)


# -- EM and F1 edge cases -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prediction", "gold", "em", "f1"),
    [
        ("the", ["a"], 1.0, 0.0),  # both normalise to "": EM equal strings, F1 no common token
        ("The The", ["The The"], 1.0, 0.0),
        ("", ["The The"], 1.0, 0.0),
        ("The The", ["The Who"], 0.0, 0.0),
        (None, ["The The"], 0.0, 0.0),  # no answer at all
        ("the", ["x"], 0.0, 0.0),
        ("Yes.", ["yes"], 1.0, 1.0),
        ("yes", ["no"], 0.0, 0.0),
        ("yes it is", ["yes"], 0.0, 0.0),  # gold is yes, prediction is not: no partial credit
        ("no", ["no way"], 0.0, 0.0),  # prediction is no, gold is not (plain F1 would be 2/3)
        ("noanswer", ["no answer"], 0.0, 0.0),
        ("yes", ["no", "Yes"], 1.0, 1.0),  # the best alias
        ("red lake", ["yes", "red river", "red"], 0.0, 2 / 3),
        ("Gustave Eiffel", ["Eiffel", "Alexandre Gustave Eiffel"], 0.0, 0.8),
    ],
)
def test_em_and_f1_edge_cases_follow_the_references(
    prediction: str | None, gold: list[str], em: float, f1: float
) -> None:
    assert exact_match(prediction, gold) == em
    assert f1_score(prediction, gold) == pytest.approx(f1)


# -- the retrieval oracle -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gold", "findable"),
    [
        ("yes", False),
        ("No.", False),
        ("True", False),
        ("3", False),
        ("UK", False),
        ("U.K.", False),
        ("The The", False),
        ("two", False),
        ("The Who", False),
        ("it is", False),
        ("USA", True),
        ("1889", True),
        ("Yes Minister", True),
        ("The Eiffel Tower", True),
    ],
)
def test_which_golds_the_oracle_may_look_for(gold: str, findable: bool) -> None:
    assert findable_in_text(gold) is findable


def test_the_oracle_skips_unfindable_aliases_and_says_when_it_cannot_tell() -> None:
    hit = [Evidence("Search", {"query": "q"}, "Yes, the UK is in Europe.", True)]
    oracle = EvidenceAnswerSolver(("yes", "UK", "United Kingdom"))
    assert oracle.findable_answers == ("United Kingdom",) and oracle.measurable
    assert oracle.solve(hit) is None
    named = [Evidence("Search", {"query": "q"}, "The United Kingdom is in Europe.", True)]
    assert oracle.solve(named) == "United Kingdom"
    yes_no = Task(task_id="y", question="Is Paris in France?", gold_answers=("yes", "Yes."))
    reader = evidence_reader(yes_no)
    assert isinstance(reader, EvidenceAnswerSolver) and not reader.measurable
    assert evidence_answers(yes_no, hit) is None
    named_task = Task(task_id="n", question="Which country?", gold_answers=("United Kingdom",))
    assert evidence_answers(named_task, hit) is False
    assert evidence_answers(named_task, named) is True


CORPUS = [
    {"id": "1", "contents": '"Paris"\nYes, Paris is the capital of France; no other city is.'},
    {
        "id": "2",
        "contents": '"Eiffel Tower"\nThe tower has 3 levels and was built by Gustave Eiffel.',
    },
]
ORACLE_ROWS = [
    {"id": "yes_no", "question": "Is Paris the capital of France?", "golden_answers": ["yes"]},
    {"id": "short", "question": "How many levels has the tower?", "golden_answers": ["3"]},
    {"id": "named", "question": "Who built the tower?", "golden_answers": ["Gustave Eiffel"]},
]
SEARCH = "Justification: look it up\nContext: {}\nSub-Goal: find it\nTool Name: Search"


def run_scripted(tmp_path: Path, row: dict[str, Any], query: str) -> list[tuple[float, bool]]:
    dataset = write(tmp_path / f"{row['id']}.jsonl", jsonl_text([row]))
    corpus = write(tmp_path / "wiki.jsonl", jsonl_text(CORPUS))
    env = gym.make("AgentFlow-Search-v0", dataset=str(dataset), corpus=str(corpus), max_turns=2)
    steps = []
    try:
        env.reset(seed=0)
        done = False
        while not done:
            _, reward, terminated, truncated, info = env.step(SEARCH.format(query))
            steps.append((float(reward), bool(terminated)))
            done = terminated or truncated
        assert info["diagnostics"]["premature_stop"] is False
        steps.append((float(info["success"]), info["end_reason"] == "verifier_stop"))
    finally:
        env.close()
    return steps


@pytest.fixture
def index_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLOW_ENV_CACHE", str(tmp_path / "cache"))


@pytest.mark.usefixtures("index_cache")
@pytest.mark.parametrize(("row", "query"), [(ORACLE_ROWS[0], "Paris"), (ORACLE_ROWS[1], "tower")])
def test_an_episode_never_stops_on_a_yes_no_or_short_gold(
    tmp_path: Path, row: dict[str, Any], query: str
) -> None:
    # The tool output holds the gold word, so the old oracle stopped after turn 1 with reward 1.
    steps = run_scripted(tmp_path, row, query)
    assert steps == [(0.0, False), (0.0, False), (0.0, False)]  # two turns, no STOP, no success


@pytest.mark.usefixtures("index_cache")
def test_an_episode_still_stops_on_a_findable_gold(tmp_path: Path) -> None:
    assert run_scripted(tmp_path, ORACLE_ROWS[2], "tower") == [(1.0, True), (1.0, True)]


@pytest.mark.usefixtures("index_cache")
def test_a_random_planner_gets_no_free_success_on_yes_no_golds(tmp_path: Path) -> None:
    dataset = write(tmp_path / "qa.jsonl", jsonl_text(ORACLE_ROWS[:2]))
    corpus = write(tmp_path / "wiki.jsonl", jsonl_text(CORPUS))
    env = gym.make("AgentFlow-Search-v0", dataset=str(dataset), corpus=str(corpus), max_turns=3)
    planner = RandomPlanner(env, seed=0)
    searched = 0
    try:
        for seed in range(8):
            observation, info = env.reset(seed=seed)
            done = False
            while not done:
                observation, _, terminated, truncated, info = env.step(
                    planner.act(observation, info)
                )
                done = terminated or truncated
            searched += info["metrics"]["tool_calls"]
            assert not info["success"] and info["end_reason"] != "verifier_stop"
    finally:
        env.close()
    assert searched > 0  # the planner did call tools: every corpus text holds "yes" or "3"
