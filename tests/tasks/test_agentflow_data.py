"""AgentFlow's benchmark files load as AgentFlow feeds them, and tagged answers are scored on
their tagged part.

Every record here is invented; only the shapes (field names, types, nesting) follow the ten
benchmark files AgentFlow evaluates on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.modules.rule import RuleExecutor, RuleGeneralist, RuleInitializer, RuleVerifier
from agentflow_env.tasks.base import Task
from agentflow_env.tasks.datasets import DatasetError, DatasetTaskSource, load_tasks
from agentflow_env.tasks.scoring import (
    ANSWER_TAG_INSTRUCTION,
    extract_tagged_answer,
    with_answer_tag_instruction,
)
from agentflow_env.workflow.frozen_modules import FinalAnswer, Modules
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.rewards import answer_score, scored_answer

TAGS = ANSWER_TAG_INSTRUCTION  # an invented question that already asks for tags ends with it

# bench -> (record, expected question, expected gold answers, expected metadata subset)
SHAPES: dict[str, tuple[dict[str, Any], str, tuple[str, ...], dict[str, str]]] = {
    "2wiki": (
        {
            "query": "Which lighthouse keeper was born first, Odo Varn or Pell Strand?",
            "image": None,
            "answer": "Odo Varn",
            "pid": 0,
        },
        "Which lighthouse keeper was born first, Odo Varn or Pell Strand?",
        ("Odo Varn",),
        {"image": ""},
    ),
    "aime24": (
        {
            "idx": 3,
            "question": "Find the number of tiles on a 7 by 9 floor.",
            "answer": 63,
            "gen_text_store": "",
            "pid": "3",
            "query": f"Find the number of tiles on a 7 by 9 floor. {TAGS}",
            "image": None,
        },
        f"Find the number of tiles on a 7 by 9 floor. {TAGS}",
        ("63",),
        {
            "idx": "3",
            "gen_text_store": "",
            "question": "Find the number of tiles on a 7 by 9 floor.",
        },
    ),
    "amc23": (
        {
            "pid": "5",
            "question": "Two trains 30 miles apart meet after 2 hours; find the sum of speeds.",
            "answer": 15,
            "image": None,
            "query": "Two trains 30 miles apart meet after 2 hours; find the sum of speeds.",
        },
        "Two trains 30 miles apart meet after 2 hours; find the sum of speeds.",
        ("15",),
        {"image": ""},
    ),
    "bamboogle": (
        {
            "idx": 1,
            "question": f"Who painted the mural in the town where Quillon Bay was founded? {TAGS}",
            "answer": ["mara ellsworth"],
            "gen_text_store": "",
            "pid": "1",
            "query": f"Who painted the mural in the town where Quillon Bay was founded? {TAGS}",
            "image": None,
        },
        f"Who painted the mural in the town where Quillon Bay was founded? {TAGS}",
        ("mara ellsworth",),
        {"idx": "1"},
    ),
    "gaia": (
        {
            "pid": "2",
            "question": "How many moons does the fictional planet Teskar have?",
            "answer": "four",
            "image": None,
            "query": "How many moons does the fictional planet Teskar have?",
            "task_id": "0000-made-up",
            "Question": "How many moons does the fictional planet Teskar have?",
            "Level": "1",
            "Final answer": "four",
            "file_name": "",
            "file_path": "",
            "Annotator Metadata": {"Steps": "1. Look it up.", "Number of steps": "1"},
            "split": "validation",
            "raw_pid": "2",
        },
        "How many moons does the fictional planet Teskar have?",
        ("four",),
        {
            "Level": "1",
            "task_id": "0000-made-up",
            "Final answer": "four",
            "Annotator Metadata": '{"Steps": "1. Look it up.", "Number of steps": "1"}',
        },
    ),
    "gameof24": (
        {
            "pid": "9",
            "question": [2, 3, 4, 1],
            "answer": ["(2+3+1)×4", "4×(1+2+3)"],
            "image": None,
            "query": "With the numbers [2, 3, 4, 1], write an expression equal to 24.",
        },
        "With the numbers [2, 3, 4, 1], write an expression equal to 24.",
        ("(2+3+1)×4", "4×(1+2+3)"),
        {"question": "[2, 3, 4, 1]"},
    ),
    "gpqa": (
        {
            "pid": "4",
            "question": "Which made-up isotope of zorbium is stable?",
            "choices": ["A. Zb-12", "B. Zb-14", "C. Zb-15", "D. Zb-17"],
            "answer_idx": 1,
            "answer": "B. Zb-14",
            "query": "Which made-up isotope of zorbium is stable?\nChoices:\nA. Zb-12\nB. Zb-14"
            "\nC. Zb-15\nD. Zb-17",
        },
        "Which made-up isotope of zorbium is stable?\nChoices:\nA. Zb-12\nB. Zb-14\nC. Zb-15"
        "\nD. Zb-17",
        ("B. Zb-14",),
        {
            "answer_idx": "1",
            "choices": '["A. Zb-12", "B. Zb-14", "C. Zb-15", "D. Zb-17"]',
            "question": "Which made-up isotope of zorbium is stable?",
        },
    ),
    "hotpotqa": (
        {
            "idx": 7,
            "question": f"Which river runs past the castle in the novel Grey Harbour? {TAGS}",
            "answer": ["the Ossel"],
            "gen_text_store": "",
            "pid": "7",
            "query": f"Which river runs past the castle in the novel Grey Harbour? {TAGS}",
            "image": None,
        },
        f"Which river runs past the castle in the novel Grey Harbour? {TAGS}",
        ("the Ossel",),
        {"idx": "7", "image": ""},
    ),
    "medqa": (
        {
            "idx": 6,
            "question": "A patient with invented symptom X most likely has which condition?",
            "options": ["A. Condition one", "B. Condition two", "C. Condition three"],
            "answer": "Condition two",
            "gen_text_store": "",
            "pid": "6",
            "query": "A patient with invented symptom X most likely has which condition?\n"
            "A. Condition one\nB. Condition two\nC. Condition three\nChoose one option.",
            "image": None,
        },
        "A patient with invented symptom X most likely has which condition?\nA. Condition one\n"
        "B. Condition two\nC. Condition three\nChoose one option.",
        ("Condition two",),
        {"options": '["A. Condition one", "B. Condition two", "C. Condition three"]', "idx": "6"},
    ),
    "musique": (
        {
            "query": "When did the ferry that serves the island where Dunmore was born open?",
            "image": None,
            "answer": "May 3, 1911",
            "pid": 11,
        },
        "When did the ferry that serves the island where Dunmore was born open?",
        ("May 3, 1911",),
        {"image": ""},
    ),
}
BENCHES = sorted(SHAPES)
CORPUS_ROWS = [
    {"id": "1", "contents": '"Teskar"\nThe fictional planet Teskar has four moons.'},
    {"id": "2", "contents": '"Dunmore ferry"\nThe ferry opened on May 3, 1911.'},
]


def write_bench(tmp_path: Path, bench: str) -> Path:
    """One benchmark's data file as AgentFlow lays it out: ``<bench>/data/data.json``."""
    folder = tmp_path / bench / "data"
    folder.mkdir(parents=True)
    path = folder / "data.json"
    path.write_text(json.dumps([SHAPES[bench][0]], ensure_ascii=False, indent=4), "utf-8")
    return path


def write_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "wiki.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in CORPUS_ROWS), "utf-8")
    return path


def check_task(task: Task, bench: str) -> None:
    record, question, gold, metadata = SHAPES[bench]
    assert task.question == question
    assert task.gold_answers == gold
    assert task.task_id == str(record["pid"])
    for key, value in metadata.items():
        assert task.metadata[key] == value, key
    assert all(isinstance(value, str) for value in task.metadata.values())
    used = {"answer", "pid", "split", "query" if "query" in record else "question"}
    assert set(record) - used <= set(task.metadata)


@pytest.mark.parametrize("bench", BENCHES)
def test_each_benchmark_shape_loads_directly(tmp_path: Path, bench: str) -> None:
    (task,) = load_tasks(write_bench(tmp_path, bench))
    check_task(task, bench)
    assert task.split == ("validation" if bench == "gaia" else "test")  # gaia's own split field


@pytest.mark.parametrize("bench", BENCHES)
def test_each_benchmark_shape_loads_through_gym_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bench: str
) -> None:
    monkeypatch.setenv("AGENTFLOW_ENV_CACHE", str(tmp_path / "cache"))
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(write_bench(tmp_path, bench)),
        corpus=str(write_corpus(tmp_path)),
        max_turns=2,
    )
    try:
        observation, _ = env.reset(seed=0)
        task = env.unwrapped.task
        check_task(task, bench)
        assert SHAPES[bench][1].splitlines()[0] in observation["text"]
    finally:
        env.close()


def test_gameof24_needs_query_since_its_question_is_only_numbers(tmp_path: Path) -> None:
    record = {**SHAPES["gameof24"][0]}
    del record["query"]
    path = tmp_path / "data.json"
    path.write_text(json.dumps([record]), "utf-8")
    with pytest.raises(DatasetError, match="missing or empty question"):
        load_tasks(path)


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("['mara ellsworth']", ("mara ellsworth",)),
        ('["Odo Varn", "O. Varn"]', ("Odo Varn", "O. Varn")),
        ("  ['a', 'b', 'a']  ", ("a", "b")),
        ("[0, 1]", ("[0, 1]",)),  # not a list of strings: one alias (it may be an interval)
        ("[unclosed", ("[unclosed",)),
        ("['x', __import__('os')]", ("['x', __import__('os')]",)),  # never evaluated
        ("[]", ("[]",)),
        (2.5, ("2.5",)),
        ([7, "seven"], ("7", "seven")),
    ],
)
def test_answers_holding_lists_and_numbers(tmp_path: Path, answer: Any, gold: tuple) -> None:
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"pid": "0", "query": "Q?", "answer": answer}]), "utf-8")
    (task,) = load_tasks(path)
    assert task.gold_answers == gold


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Reasoning. <answer>Paris</answer>", "Paris"),
        ("<answer>first</answer> then <answer>second</answer>", "second"),
        ("<ANSWER>Upper</Answer>", "Upper"),
        ("<answer>\n   Odo Varn \n\t</answer>", "Odo Varn"),
        ("< answer >spaced</ answer >", "spaced"),
        ("<answer>a <answer>inner</answer>", "inner"),
        ("<answer>multi\nline</answer> trailing words", "multi\nline"),
        ("<answer>  </answer>", ""),
        ("no tags at all", None),
        ("<answer>never closed", None),
        ("closed only</answer>", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_tagged_answer(text: str | None, expected: str | None) -> None:
    assert extract_tagged_answer(text) == expected


def test_answer_score_reads_the_tagged_part() -> None:
    gold = ["Odo Varn"]
    tagged = "Odo was born in 1801 and Pell in 1820, so <answer>Odo Varn</answer>"
    assert answer_score(tagged, gold, "exact_match") == 1.0
    assert answer_score("Odo Varn", gold, "exact_match") == 1.0  # untagged: scored whole
    assert answer_score("It is Odo Varn, surely.", gold, "exact_match") == 0.0
    assert answer_score("Odo Varn, not <answer>Pell Strand</answer>", gold, "exact_match") == 0.0
    assert (
        answer_score("<answer>wrong</answer><answer>odo varn.</answer>", gold, "exact_match") == 1.0
    )
    assert answer_score("<answer></answer> Odo Varn", gold, "exact_match") == 0.0
    assert answer_score("words then <answer>Odo</answer>", gold, "f1") == pytest.approx(2 / 3)
    assert answer_score(None, gold, "exact_match") == 0.0
    assert scored_answer("so <answer> Odo </answer>") == "Odo"
    assert scored_answer("no tags") == "no tags" and scored_answer(None) is None


class TaggingGeneralist:
    """The rule generalist's answer, wrapped in reasoning and ``<answer>`` tags."""

    async def answer(self, task: Task, memory: Memory) -> FinalAnswer:
        final = await RuleGeneralist().answer(task, memory)
        text = f"After searching, I conclude. <Answer> {final.answer} </Answer>"
        return FinalAnswer(text, text)


def test_an_episode_scores_a_tagged_final_answer_on_its_tagged_part(tmp_path: Path) -> None:
    source = DatasetTaskSource(write_bench(tmp_path, "musique"), corpus=write_corpus(tmp_path))
    modules = Modules(
        initializer=RuleInitializer(),
        executor=RuleExecutor(),
        verifier=RuleVerifier(),
        generalist=TaggingGeneralist(),
    )
    env = AgentFlowEnv(task_source=source, modules=modules, max_turns=3)
    try:
        env.reset(seed=0)
        action = "Context: Dunmore ferry\nSub-Goal: find the opening date\nTool Name: Search"
        _, reward, terminated, _, info = env.step(action)
        assert terminated and "<Answer>" in info["answer"]
        assert reward == 1.0 and info["success"]
    finally:
        env.close()


def test_answer_tag_instruction_is_appended_once() -> None:
    assert "<answer>" in ANSWER_TAG_INSTRUCTION and "</answer>" in ANSWER_TAG_INSTRUCTION
    assert with_answer_tag_instruction("Who? ") == f"Who? {ANSWER_TAG_INSTRUCTION}"
    asked = "Who? Reply as <ANSWER>name</ANSWER>."
    assert with_answer_tag_instruction(asked) == asked
    half = "Who? Start with <answer>."
    assert with_answer_tag_instruction(half).endswith(ANSWER_TAG_INSTRUCTION)


def test_answer_tag_suffix_option(tmp_path: Path) -> None:
    plain = {"pid": "0", "query": "Which planet has four moons?", "answer": "Teskar"}
    asked = SHAPES["bamboogle"][0]  # its query already asks for tags
    path = tmp_path / "data.json"
    path.write_text(json.dumps([plain, asked]), "utf-8")
    unchanged = load_tasks(path)
    assert [t.question for t in unchanged] == [plain["query"], asked["query"]]
    suffixed = DatasetTaskSource(path, answer_tag_suffix=True).tasks
    assert suffixed[0].question == f"{plain['query']} {ANSWER_TAG_INSTRUCTION}"
    assert suffixed[1].question == asked["query"]
    assert [t.gold_answers for t in suffixed] == [t.gold_answers for t in unchanged]
    assert load_tasks(path, answer_tag_suffix=True)[0].question == suffixed[0].question
