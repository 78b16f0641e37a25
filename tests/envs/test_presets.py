"""Presets (AgentFlow's evaluation and training setups), the time limit and the sub-question hint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env import SearchEnvConfig
from agentflow_env.cli import build_parser
from agentflow_env.envs.config import settings_from_args
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tools.agentflow.names import AGENTFLOW_TOOLS


def test_presets_fill_what_is_not_given() -> None:
    config = SearchEnvConfig.from_kwargs(preset="agentflow_eval")
    assert (config.prompt_style, config.max_turns, config.time_limit_s) == ("agentflow", 10, 300.0)
    assert tuple(config.tools) == AGENTFLOW_TOOLS and config.modules == "llm"
    assert not config.show_sub_questions and config.verify_invalid_turns
    train = SearchEnvConfig.from_kwargs(preset="agentflow_train", max_turns=5, modules="rule")
    assert (train.max_turns, train.modules, train.reward) == (5, "rule", "llm_judge")
    assert not train.answer_tag_suffix  # only with a dataset
    assert SearchEnvConfig.from_dict(train.to_dict()) == train


@pytest.mark.parametrize("preset", ["agentflow_eval", "agentflow_train"])
def test_presets_show_agentflows_five_tools_in_its_order(preset: str) -> None:
    offline = {"modules": "rule", "reward": "exact_match"}  # no model endpoint here
    env = gym.make("AgentFlow-Search-v0", preset=preset, hops=1, **offline)
    text = env.reset(seed=0)[0]["text"]
    env.close()
    shown = [
        "Generalist_Solution_Generator_Tool",
        "Ground_Google_Search_Tool",
        "Python_Code_Generator_Tool",
        "Web_RAG_Search_Tool",
        "Wikipedia_RAG_Search_Tool",
    ]
    assert f"**Available Tools:** {shown}" in text
    metadata = text.split("**Toolbox Metadata:** ", 1)[1]
    assert [metadata.index(f"{{'tool_name': '{name}'") for name in shown] == sorted(
        metadata.index(f"{{'tool_name': '{name}'") for name in shown
    )
    assert "'user_metadata': {'limitations': '\\n1. " in metadata  # the Google tool's keys


def test_the_training_preset_asks_dataset_questions_for_tagged_answers(tmp_path: Path) -> None:
    (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "Who?", "answers": ["Ada"]}) + "\n")
    (tmp_path / "wiki.jsonl").write_text(json.dumps({"id": "1", "contents": "Ada\nAda."}) + "\n")
    config = SearchEnvConfig.from_kwargs(
        preset="agentflow_train",
        dataset=str(tmp_path / "qa.jsonl"),
        corpus=str(tmp_path / "wiki.jsonl"),
    )
    assert config.answer_tag_suffix
    (task,) = config.make_task_source().tasks
    assert task.question.startswith("Who? ") and "<answer>" in task.question


def test_an_unknown_preset_is_refused() -> None:
    with pytest.raises(ValueError, match="preset"):
        gym.make("AgentFlow-Search-v0", preset="agentflow_v2")


def test_the_command_line_takes_a_preset_and_switches_both_ways() -> None:
    args = build_parser().parse_args(
        ["run", "--preset", "agentflow_eval", "--show-sub-questions", "--no-verify-invalid-turns"]
    )
    settings = settings_from_args(args, args.env_settings)
    config = SearchEnvConfig.from_kwargs(**settings)
    assert config.show_sub_questions and not config.verify_invalid_turns
    assert config.prompt_style == "agentflow"


def test_a_time_limit_ends_the_episode_at_the_turn_that_passes_it() -> None:
    slow = {"name": "Search", "latency_s": 0.3}
    env = gym.make("AgentFlow-Search-v0", hops=3, tools=[slow, "Calculator"], time_limit_s=0.2)
    planner = ExpertPlanner(env)
    observation, info = env.reset(seed=0)
    observation, _, terminated, truncated, info = env.step(planner.act(observation, info))
    assert truncated and not terminated and info["end_reason"] == "time_limit"
    assert info["turn"] == 1
    env.close()


@pytest.mark.parametrize("style", ["full", "agentflow"])
def test_sub_question_hints_are_shown_only_when_asked(style: str) -> None:
    env = gym.make("AgentFlow-Search-v0", hops=2, prompt_style=style)
    text = env.reset(seed=0)[0]["text"]
    sub_question = env.unwrapped.session.memory.analysis.sub_questions[0]
    assert sub_question in text  # on by default; the agentflow presets turn it off
    env.close()
    env = gym.make("AgentFlow-Search-v0", hops=2, prompt_style=style, show_sub_questions=False)
    text = env.reset(seed=0)[0]["text"]
    assert sub_question not in text
    env.close()


@pytest.mark.parametrize(
    ("settings", "question"),
    [
        ({}, "Who?"),  # this project's own: stripped
        ({"preset": "agentflow_eval"}, "  Who?\n"),  # AgentFlow sends it as the file has it
        ({"agentflow_script": "eval"}, "  Who?\n"),
    ],
)
def test_dataset_questions_are_verbatim_under_agentflows_scripts(
    tmp_path: Path, settings: dict[str, str], question: str
) -> None:
    (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "  Who?\n", "answers": ["Ada"]}))
    (tmp_path / "wiki.jsonl").write_text(json.dumps({"id": "1", "contents": "Ada\nAda."}) + "\n")
    config = SearchEnvConfig.from_kwargs(
        dataset=str(tmp_path / "qa.jsonl"), corpus=str(tmp_path / "wiki.jsonl"), **settings
    )
    (task,) = config.make_task_source().tasks
    assert task.question == question


@pytest.mark.parametrize(
    ("script", "ends"),
    [(None, True), ("train", True), ("eval", False)],  # eval: the clock starts after analysis
)
def test_the_time_limit_counts_from_where_agentflows_script_starts_its_clock(
    monkeypatch: pytest.MonkeyPatch, script: str | None, ends: bool
) -> None:
    from agentflow_env.workflow import session as session_module

    analyze = session_module.analyze_query

    async def slow_analysis(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.5)  # longer than the limit; the turn after it is quick
        return await analyze(*args, **kwargs)

    monkeypatch.setattr(session_module, "analyze_query", slow_analysis)
    env = gym.make("AgentFlow-Search-v0", hops=3, time_limit_s=1.2, agentflow_script=script)
    planner = ExpertPlanner(env)
    observation, info = env.reset(seed=0)
    _, _, _, truncated, info = env.step(planner.act(observation, info))
    assert (info.get("end_reason") == "time_limit") is ends and truncated is ends
    env.close()
