"""The Gymnasium environment: registration, the checker, the workflow, errors, determinism."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentflow_env
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner, RandomPlanner
from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.workflow.actions import format_planner_action

ENV_ID = "AgentFlow-Search-v0"


def make(**kwargs: Any) -> gym.Env:
    return gym.make(ENV_ID, **kwargs)


def test_make_by_id_and_by_module_prefix():
    env = make()
    assert isinstance(env.unwrapped, agentflow_env.AgentFlowEnv)
    env.close()
    env = gym.make(f"agentflow_env:{ENV_ID}")
    assert isinstance(env.unwrapped, agentflow_env.AgentFlowEnv)
    env.close()


def test_check_env_passes_without_warnings():
    env = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    messages = [str(w.message) for w in caught]
    assert messages == []
    env.close()


def test_observation_is_chat_prompt_with_matching_ids():
    env = make()
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    tokenizer = env.unwrapped.tokenizer
    assert obs["text"].endswith("<|im_start|>assistant\n")
    assert obs["token_ids"].dtype == np.int64
    assert tokenizer.decode(obs["token_ids"].tolist()) == obs["text"]
    assert info["question"] in obs["text"]
    env.close()


def test_expert_solves_one_episode_and_reports_info():
    env = make(hops=2)
    record = run_episode(env, ExpertPlanner(env), seed=11)
    assert record.success and record.reward == 1.0
    assert record.end_reason == "verifier_stop"
    assert record.metrics["turns"] == record.metrics["tool_calls"] >= 2
    memory = record.memory
    required = {
        "turn",
        "sub_goal",
        "selected_tool",
        "tool_arguments",
        "tool_result",
        "verification_status",
        "open_questions",
        "errors",
        "justification",
        "context",
    }
    assert all(required <= set(entry) for entry in memory)
    assert memory[-1]["verification_status"] == "STOP"
    assert all(e["verification_status"] == "CONTINUE" for e in memory[:-1])
    env.close()


def test_step_after_the_end_asks_for_reset():
    env = make(hops=1)
    env.reset(seed=0)
    expert = ExpertPlanner(env)
    terminated = truncated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = env.step(expert.act(None, {}))
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        env.unwrapped.step("Tool Name: Search")
    env.close()


@pytest.mark.parametrize(
    "action",
    [
        "",
        "   \n\t ",
        "x" * 100_000,
        "Justification: 無\nContext: 🙂\nSub-Goal: ?\nTool Name: Teleport",
        "Context: something\nSub-Goal: no tool here",
        format_planner_action(justification="", context="", sub_goal="", tool_name="Search"),
        None,
        {"tool": "Search"},
        [10**9, 3],
        b"\xff\xfe",
    ],
)
def test_bad_actions_are_observations_that_cost_a_turn(action):
    env = make(max_turns=3)
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.unwrapped.step(action)
    assert not terminated and not truncated and reward == 0.0
    entry = info["memory"][-1]
    assert entry["turn"] == 1
    assert entry["errors"], entry
    assert "Errors:" in obs["text"]
    # The env keeps working afterwards.
    expert = ExpertPlanner(env)
    env.unwrapped.step(expert.act(obs, info))
    env.close()


def test_invalid_actions_count_and_can_be_penalised():
    env = make(max_turns=2, lambda_errors=0.25)
    env.reset(seed=5)
    env.step("no fields at all")
    _, reward, terminated, truncated, info = env.step("Tool Name: NoSuchTool")
    assert truncated and not terminated
    assert info["metrics"]["invalid_actions"] == 2
    assert info["success"] is False
    assert reward == pytest.approx(-0.5)
    env.close()


def test_truncation_at_max_turns_still_writes_an_answer():
    env = make(max_turns=1, hops=2)
    env.reset(seed=2)
    _, _, terminated, truncated, info = env.step(ExpertPlanner(env).act(None, {}))
    assert truncated and not terminated
    assert info["end_reason"] == "max_turns"
    assert "answer" in info and info["answer"] is None
    assert info["success"] is False
    env.close()


def test_same_seed_same_actions_same_trajectory():
    def trajectory(seed: int) -> list[Any]:
        env = make(max_turns=4)
        planner = RandomPlanner(env, seed=7)
        obs, info = env.reset(seed=seed)
        steps = [obs["text"]]
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(planner.act(obs, info))
            steps.append((obs["text"], obs["token_ids"].tolist(), reward, info["memory"]))
            done = terminated or truncated
        env.close()
        return steps

    assert trajectory(42) == trajectory(42)
    assert trajectory(42) != trajectory(43)


def test_token_id_actions_are_decoded_and_kept():
    env = make(hops=1)
    env.reset(seed=4)
    text = ExpertPlanner(env).act(None, {})
    tokenizer = env.unwrapped.tokenizer
    ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
    _, reward, terminated, _, info = env.step(np.asarray(ids))
    assert terminated and reward == 1.0
    action_events = [e for e in env.unwrapped.session.memory.events if e.kind == "action"]
    assert action_events[0].payload["token_ids"] == ids
    env.close()


def test_many_envs_share_one_search_index():
    from agentflow_env.retrieval.bm25 import get_index

    envs = [make() for _ in range(64)]
    corpora = set()
    for i, env in enumerate(envs):
        env.reset(seed=i)
        corpora.add(id(env.unwrapped.task.corpus))
    assert len(corpora) == 1
    corpus = envs[0].unwrapped.task.corpus
    assert get_index(corpus) is get_index(envs[-1].unwrapped.task.corpus)
    for env in envs:
        env.close()


def test_ansi_render_shows_the_episode():
    env = make(render_mode="ansi", hops=2)
    env.reset(seed=8)
    env.step(ExpertPlanner(env).act(None, {}))
    text = env.render()
    assert "Turn 1 | Search" in text
    assert env.unwrapped.task.question in text
    env.close()


def test_sync_and_async_vector_envs_step_a_batch():
    fns = [lambda: gym.make(ENV_ID, hops=1, max_turns=2) for _ in range(2)]
    action = format_planner_action(
        justification="j", context="anything", sub_goal="s", tool_name="Search"
    )
    for vector in (
        gym.vector.SyncVectorEnv(fns),
        gym.vector.AsyncVectorEnv(fns, shared_memory=False),
    ):
        obs, info = vector.reset(seed=[1, 2])
        assert len(obs["text"]) == 2 and all(isinstance(t, str) for t in obs["text"])
        obs, reward, terminated, truncated, info = vector.step((action, action))
        assert reward.shape == (2,)
        assert len(obs["token_ids"]) == 2
        vector.close()


class _HangingTool(Tool):
    card = ToolCard("Sleeper", "Sleeps forever.", {"query": {"type": "string"}}, "text", "query")
    timeout_s = 0.2

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class _CrashingTool(Tool):
    card = ToolCard("Crasher", "Raises.", {"query": {"type": "string"}}, "text", "query")

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError("boom")


class _ChattyTool(Tool):
    card = ToolCard("Chatty", "Prints a lot.", {"query": {"type": "string"}}, "text", "query")

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(ok=True, output="y" * 10_000_000)


@pytest.mark.parametrize(
    ("tool", "expected"),
    [(_HangingTool(), "timed out"), (_CrashingTool(), "RuntimeError: boom"), (_ChattyTool(), "")],
)
def test_failing_tools_become_observations(tool, expected):
    env = agentflow_env.AgentFlowEnv(tools=["Search", tool], max_tool_output_chars=1000)
    env.reset(seed=0)
    action = format_planner_action(
        justification="j", context="x", sub_goal="s", tool_name=tool.name
    )
    obs, _, _, _, info = env.step(action)
    entry = info["memory"][-1]
    assert entry["selected_tool"] == tool.name
    if expected:
        assert entry["tool_ok"] is False and expected in entry["errors"][0]
    else:
        assert entry["tool_ok"] is True and len(entry["tool_result"]) < 1100
        assert "output cut" in entry["tool_result"]
    env.step(ExpertPlanner(env).act(obs, info))  # still usable
    env.close()


def test_memory_log_is_append_only_and_views_keep_the_query():
    env = make(hops=3)
    env.reset(seed=9)
    expert = ExpertPlanner(env)
    session = env.unwrapped.session
    seen: list[Any] = []
    for _ in range(2):
        env.step(expert.act(None, {}))
        events = session.memory.events
        assert list(events[: len(seen)]) == seen
        seen = list(events)
    view = session.memory.render(keep_full=0, max_old_result_chars=20)
    assert "[shortened]" in view
    obs = session.observation
    assert session.task.question in obs.text
    env.close()
