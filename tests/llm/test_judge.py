"""``reward="llm_judge"`` as AgentFlow scores: the judge reads the last ``<answer>`` content, and on
a multiple-choice record (GPQA's ``choices``, MedQA's ``options``) it asks which option the
answer picks and compares that option with the gold answer, against a real local server.

Every record here is invented; only the shapes follow AgentFlow's GPQA and MedQA files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer, Reply, bounded, user_text

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.llm import LLMEndpoint, LLMError, LLMJudge
from agentflow_env.llm.judge import gold_letter, lettered_options
from agentflow_env.llm.prompts import parse_choice
from agentflow_env.tasks.datasets import load_tasks
from agentflow_env.tasks.scoring import answer_options
from agentflow_env.workflow.actions import format_finish_action

GPQA_LIKE = {
    "pid": "0",
    "question": "Which lantern burns longest on one filling?",
    "choices": ["A. the brass one", "B. the tin one", "C. the glass one", "D. the clay one"],
    "answer_idx": 1,
    "answer": "B. the tin one",
    "query": "Which lantern burns longest on one filling?\nChoices:\nA. the brass one\n"
    "B. the tin one\nC. the glass one\nD. the clay one",
}
MEDQA_LIKE = {
    "idx": 0,
    "pid": "0",
    "question": "A keeper coughs at dawn. What is the most likely cause?\nA. dust\nB. fog",
    "options": ["A. lamp soot", "B. sea fog", "C. cold air", "D. old dust"],
    "answer": "sea fog",
    "gen_text_store": "",
    "query": "A keeper coughs at dawn. What is the most likely cause?\nA. lamp soot\n"
    "B. sea fog\nC. cold air\nD. old dust",
}
LETTERED = [("A", "the brass one"), ("B", "the tin one"), ("C", "the glass one")]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def judge_for(server: FakeOpenAIServer) -> LLMJudge:
    return LLMJudge(LLMEndpoint(server.base_url, "fake", timeout_s=2.0, max_retries=0))


def write_bench(tmp_path: Path, record: dict[str, Any]) -> tuple[Path, Path]:
    data = tmp_path / "data.json"
    data.write_text(json.dumps([record]))
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": "Lanterns\nA lantern burns oil."}) + "\n")
    return data, corpus


# -- reading the options and the gold -----------------------------------------------------------


def test_options_are_read_from_either_field_as_the_loader_keeps_them(tmp_path: Path) -> None:
    for record in (GPQA_LIKE, MEDQA_LIKE):
        data, _ = write_bench(tmp_path, record)
        (task,) = load_tasks(data)
        key = "choices" if "choices" in record else "options"
        assert answer_options(task.metadata) == tuple(record[key])
    assert answer_options({"choices": ["only one"]}) == ()
    assert answer_options({"options": "[not json"}) == ()
    assert answer_options({"image": ""}) == ()


def test_options_keep_their_own_letters_or_get_letters_in_order() -> None:
    assert lettered_options(GPQA_LIKE["choices"])[1] == ("B", "the tin one")
    assert lettered_options(["(a) ash", "(b) elm"]) == [("A", "ash"), ("B", "elm")]
    assert lettered_options(["ash", "elm", ""]) == [("A", "ash"), ("B", "elm")]
    # letters that repeat are not labels: the options are lettered in order, whole
    assert lettered_options(["A. ash", "A. elm"]) == [("A", "A. ash"), ("B", "A. elm")]


@pytest.mark.parametrize(
    ("gold", "letter"),
    [
        (["B. the tin one"], "B"),  # GPQA: the whole line
        (["the TIN one."], "B"),  # MedQA: the option's text
        (["b"], "B"),
        (["(C)"], "C"),
        (["the iron one"], None),  # names no option
        (["A", "the tin one"], None),  # names two
    ],
)
def test_the_gold_answer_names_one_option(gold: list[str], letter: str | None) -> None:
    assert gold_letter(gold, LETTERED) == letter


def test_the_choice_reader_takes_the_last_known_letter() -> None:
    letters = ["A", "B", "C"]
    assert parse_choice("Analysis: a multiple-choice question.\nChoice: B", letters) == "B"
    assert parse_choice("**Choice:** c.", letters) == "C"
    assert parse_choice("Choice: A\nOn reflection,\nChoice: none", letters) == ""
    assert parse_choice("Choice: Z", letters) is None
    assert parse_choice("I cannot tell.", letters) is None


# -- the judge against a served model ------------------------------------------------------------


def test_the_judge_asks_which_option_was_picked_then_compares_it(
    server: FakeOpenAIServer,
) -> None:
    judge = judge_for(server)
    options = GPQA_LIKE["choices"]
    server.push(Reply("Analysis: it settles on the second.\nChoice: B"), role="judge")
    score = bounded(
        judge.judge(GPQA_LIKE["query"], "the second, tin", ["B. the tin one"], options=options)
    )
    assert score == 1.0
    (request,) = server.requests
    prompt = user_text(request)
    assert "A. the brass one\nB. the tin one\nC. the glass one\nD. the clay one" in prompt
    assert "Model Response: the second, tin" in prompt
    assert "B. the tin one" not in prompt.split("Model Response:")[1]  # the gold is not shown

    server.push(Reply("Choice: C"), role="judge")
    assert bounded(judge.judge("q", "glass", ["B. the tin one"], options=options)) == 0.0
    server.push(Reply("Analysis: it hedges.\nChoice: none"), role="judge")
    assert bounded(judge.judge("q", "brass or tin", ["B. the tin one"], options=options)) == 0.0
    assert len(server.requests) == 3


def test_an_answer_that_is_one_option_needs_no_call(server: FakeOpenAIServer) -> None:
    judge = judge_for(server)
    options = MEDQA_LIKE["options"]
    assert bounded(judge.judge("q", "B", ["sea fog"], options=options)) == 1.0
    assert bounded(judge.judge("q", "Sea fog.", ["sea fog"], options=options)) == 1.0
    assert bounded(judge.judge("q", "A. lamp soot", ["sea fog"], options=options)) == 0.0
    assert server.requests == []


def test_a_gold_naming_no_option_is_judged_against_the_picked_option(
    server: FakeOpenAIServer,
) -> None:
    server.push(Reply("Choice: D"), Reply("Analysis: same.\nVerdict: True"), role="judge")
    score = bounded(
        judge_for(server).judge(
            "q", "it is the dust", ["dust from old books"], options=MEDQA_LIKE["options"]
        )
    )
    assert score == 1.0
    second = user_text(server.requests[1])
    assert "Model Response: D. old dust" in second and "dust from old books" in second


def test_a_reply_naming_no_option_is_asked_again_then_fails(server: FakeOpenAIServer) -> None:
    server.push(Reply("Hmm."), Reply("Choice: Q"), role="judge")
    with pytest.raises(LLMError, match="Choice"):
        bounded(judge_for(server).judge("q", "tin", ["B"], options=GPQA_LIKE["choices"]))
    assert len(server.requests) == 2


# -- in an episode --------------------------------------------------------------------------------


@pytest.mark.parametrize("record", [GPQA_LIKE, MEDQA_LIKE], ids=["gpqa", "medqa"])
def test_an_episode_judges_the_last_tagged_answer_against_the_records_options(
    tmp_path: Path, server: FakeOpenAIServer, record: dict[str, Any]
) -> None:
    data, corpus = write_bench(tmp_path, record)
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(data),
        corpus=str(corpus),
        termination="planner",
        reward="llm_judge",
        judge=judge_for(server),
    )
    server.push(Reply("Analysis: the second option.\nChoice: B"), role="judge")
    try:
        env.reset(seed=0)
        answer = "<answer>the first one</answer> On reflection: <answer>my pick is two</answer>"
        _, reward, terminated, _, info = env.step(format_finish_action(answer))
    finally:
        env.close()
    assert terminated and reward == 1.0 and info["score"] == 1.0
    (request,) = server.requests
    prompt = user_text(request)
    assert "Model Response: my pick is two" in prompt and "the first one" not in prompt
    assert "Options:\nA. " in prompt


def test_an_episode_without_options_asks_for_a_verdict_on_the_last_tagged_answer(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    record = {"pid": "0", "query": "Who lit the lamp?", "answer": ["Odo Varn"]}
    data, corpus = write_bench(tmp_path, record)
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(data),
        corpus=str(corpus),
        termination="planner",
        reward="llm_judge",
        judge=judge_for(server),
    )
    server.push(Reply("Analysis: same keeper.\nVerdict: True"), role="judge")
    try:
        env.reset(seed=0)
        answer = "<answer>Pell</answer> no, <answer>Odo</answer>"
        _, reward, _, _, _ = env.step(format_finish_action(answer))
    finally:
        env.close()
    assert reward == 1.0
    prompt = user_text(server.requests[0])
    assert "Model Response: Odo\n" in prompt and "Labeled Answer: Odo Varn" in prompt
    assert "Options:" not in prompt


# -- AgentFlow's reading of an answer that names no option (choice_fallback) --------------------


@pytest.mark.parametrize(
    ("fallback", "gold", "score"),
    [
        ("agentflow", "A. the brass one", 1.0),  # counted as the first option, which is right
        ("agentflow", "B. the tin one", 0.0),
        ("none", "A. the brass one", 0.0),
        (None, "A. the brass one", 0.0),  # today's reading
    ],
)
def test_an_answer_naming_no_option_counts_as_the_first_under_agentflows_fallback(
    server: FakeOpenAIServer, fallback: Any, gold: str, score: float
) -> None:
    endpoint = LLMEndpoint(server.base_url, "fake", timeout_s=2.0, max_retries=0)
    judge = LLMJudge(endpoint, choice_fallback=fallback)
    server.push(Reply("Analysis: it hedges.\nChoice: none"), role="judge")
    judged = bounded(judge.judge("q", "brass or tin", [gold], options=GPQA_LIKE["choices"]))
    assert judged == score
    # Only the fallback's scores say what they would be without it.
    assert getattr(judged, "without_fallback", None) == (0.0 if fallback == "agentflow" else None)
    # An empty answer names no option either; no answer at all scores 0.
    empty = bounded(judge.judge("q", "  ", [gold], options=GPQA_LIKE["choices"]))
    assert empty == score and len(server.requests) == 1
    assert bounded(judge.judge("q", None, [gold], options=GPQA_LIKE["choices"])) == 0.0


def test_an_unknown_choice_fallback_is_refused() -> None:
    with pytest.raises(ValueError, match="choice_fallback"):
        LLMJudge(LLMEndpoint("http://127.0.0.1:9/v1", "fake"), choice_fallback="first")  # type: ignore[arg-type]


def test_the_eval_preset_counts_no_option_as_agentflows_scoring_script_does() -> None:
    from agentflow_env.envs.config import SearchEnvConfig

    assert SearchEnvConfig.from_kwargs(preset="agentflow_eval").choice_fallback == "agentflow"
    assert SearchEnvConfig.from_kwargs(preset="agentflow_train").choice_fallback is None
    assert SearchEnvConfig.from_kwargs().choice_fallback is None


def test_an_episode_reports_its_score_without_the_fallback(
    tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = {**GPQA_LIKE, "answer_idx": 0, "answer": "A. the brass one"}
    data, corpus = write_bench(tmp_path, record)
    monkeypatch.setenv("AGENTFLOW_JUDGE_BASE_URL", server.base_url)
    monkeypatch.setenv("AGENTFLOW_JUDGE_MODEL", "fake")
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(data),
        corpus=str(corpus),
        termination="planner",
        reward="llm_judge",
        choice_fallback="agentflow",
    )
    server.push(Reply("Analysis: no pick.\nChoice: none"), role="judge")
    try:
        env.reset(seed=0)
        _, reward, _, _, info = env.step(format_finish_action("<answer>I cannot tell</answer>"))
    finally:
        env.close()
    assert reward == 1.0 and info["score"] == 1.0
    assert info["diagnostics"]["score_without_choice_fallback"] == 0.0


def test_the_summary_reports_both_scores_where_they_differ() -> None:
    from agentflow_env.evaluation.metrics import format_table, summarize_diagnostics

    rows = [
        {"score": 1.0, "score_without_choice_fallback": 0.0, "success": False},
        {"score": 1.0, "success": True},
    ]
    summary = summarize_diagnostics(rows)
    assert summary["score"]["value"] == 1.0
    assert summary["score_without_choice_fallback"]["value"] == 0.5
    assert "mean score without the choice fallback  0.50" in format_table({"run": summary})
    same = summarize_diagnostics([{"score": 0.0, "score_without_choice_fallback": 0.0}])
    assert "score_without_choice_fallback" not in same
    assert "choice fallback" not in format_table({"run": same})
