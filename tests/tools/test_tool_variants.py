"""Tool variants for ablations (``tools=[{"name": ..., "rename"/"description"/"failure_rate"/
"max_output_chars"/"latency_s": ...}]``), through ``gym.make`` and real episodes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tools import CalculatorTool, PythonTool, SearchTool, ToolArgumentError
from agentflow_env.tools.variants import ToolVariant, VariantOptions, with_variant
from agentflow_env.workflow.actions import format_planner_action, parse_planner_action

ENV_ID = "AgentFlow-Search-v0"


def run_episode(env: gym.Env, seed: int, act: Any, **reset: Any) -> dict[str, Any]:
    """Play one episode with ``act(observation, info) -> action``; the last ``info``."""
    observation, info = env.reset(seed=seed, **reset)
    done = False
    while not done:
        observation, _, terminated, truncated, info = env.step(act(observation, info))
        done = terminated or truncated
    return info


def renaming(planner: ExpertPlanner, old: str, new: str) -> Any:
    """The expert's actions with tool ``old`` called ``new``."""

    def act(observation: Any, info: Any) -> str:
        action = parse_planner_action(planner.act(observation, info))
        name = new if action.tool_name == old else action.tool_name
        return format_planner_action(action.justification, action.context, action.sub_goal, name)

    return act


def calculator_steps(observation: Any, info: dict[str, Any]) -> str:
    """One distinct Calculator call per turn (the verifier never stops on these)."""
    turn = info["turn"]
    return format_planner_action("count", f"{turn} + 1000", "add", "Calculator")


def tool_calls(env: gym.Env) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in env.unwrapped.session.memory.events if e.kind == "tool_call"]


# -- rename ------------------------------------------------------------------------------------
def test_renamed_tool_hides_the_old_name_and_rejects_it() -> None:
    env = gym.make(ENV_ID, hops=2, tools=[{"name": "Search", "rename": "Lookup"}, "Calculator"])
    observation, _ = env.reset(seed=3)
    assert env.unwrapped.tools.names == ("Lookup", "Calculator")
    assert "- Lookup: " in observation["text"]
    assert 'Lookup(query="' in observation["text"]  # the card's examples call the new name
    assert "Search" not in observation["text"]
    info = run_episode(env, 3, ExpertPlanner(env).act)
    searches = [e for e in info["memory"] if e["sub_goal"] and e["selected_tool"] is None]
    assert searches, "the expert names Search: those turns must be invalid"
    for entry in searches:
        assert entry["verification_status"] == "INVALID"
        assert entry["errors"] == ["unknown tool 'Search'; available tools: Lookup, Calculator"]
    assert info["metrics"]["invalid_actions"] == len(searches)
    assert not info["success"]


def test_planner_using_the_new_name_gets_the_same_results() -> None:
    plain = gym.make(ENV_ID, hops=2)
    expected = run_episode(plain, 5, ExpertPlanner(plain).act)["memory"]
    renamed = gym.make(ENV_ID, hops=2, tools=[{"name": "Search", "rename": "Lookup"}, "Calculator"])
    got = run_episode(renamed, 5, renaming(ExpertPlanner(renamed), "Search", "Lookup"))["memory"]
    assert [e["selected_tool"] for e in expected][:2] == ["Search", "Search"]
    assert [e["selected_tool"] for e in got][:2] == ["Lookup", "Lookup"]
    for before, after in zip(expected[:2], got[:2], strict=True):
        assert after["tool_ok"] and not after["errors"]
        assert after["tool_arguments"] == before["tool_arguments"]
        assert after["tool_result"] == before["tool_result"]


def test_planner_using_the_new_name_succeeds_on_a_dataset(tmp_path: Path) -> None:
    dataset = tmp_path / "qa.jsonl"
    dataset.write_text(
        json.dumps({"id": "q0", "question": "Who built the tower?", "golden_answers": ["Eiffel"]})
        + "\n",
        encoding="utf-8",
    )
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "1", "contents": '"Tower"\nA wrought-iron tower built by Gustave Eiffel.'},
        {"id": "2", "contents": "Bridge\nA stone bridge over the river."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = gym.make(
        ENV_ID,
        dataset=str(dataset),
        corpus=str(corpus),
        tools=[{"name": "Search", "rename": "Wiki_Lookup"}],
        max_turns=3,
    )

    def lookup(observation: Any, info: Any) -> str:
        return format_planner_action("find it", "tower built by", "who built it", "Wiki_Lookup")

    info = run_episode(env, 0, lookup)
    assert info["success"] and info["end_reason"] == "verifier_stop"
    assert info["memory"][0]["selected_tool"] == "Wiki_Lookup"


def test_renamed_argument_errors_name_the_new_name() -> None:
    variant = ToolVariant(SearchTool(), VariantOptions(rename="Lookup"))
    with pytest.raises(ToolArgumentError, match=r"^Lookup: missing required argument 'query'"):
        variant.validate({})
    python = PythonTool()
    wrapped = with_variant(python, VariantOptions(rename="Code"))
    assert wrapped.stop_grace_s == python.stop_grace_s is not None
    assert wrapped.timeout_s == python.timeout_s
    assert isinstance(wrapped, ToolVariant) and wrapped.original_name == "Python"
    assert with_variant(python, VariantOptions()) is python


def test_description_replaces_the_card_text() -> None:
    env = gym.make(ENV_ID, hops=1, tools=[{"name": "Search", "description": "Finds pages."}])
    observation, _ = env.reset(seed=0)
    assert "- Search: Finds pages." in observation["text"]
    assert "Keyword search over the document collection" not in observation["text"]
    card = env.unwrapped.tools.get("Search").card
    assert card.input_schema == SearchTool().card.input_schema


def test_a_renamed_copy_beside_the_original_and_clashing_names() -> None:
    env = gym.make(ENV_ID, hops=1, tools=["Search", {"name": "Search", "rename": "Lookup"}])
    assert env.unwrapped.tools.names == ("Search", "Lookup")
    with pytest.raises(ValueError, match=r"'Search' and 'search_tool' \(renamed 'Calculator'\)"):
        gym.make(ENV_ID, tools=["Search", {"name": "Calculator", "rename": "search_tool"}])
    with pytest.raises(ValueError, match="same name for the planner"):
        gym.make(ENV_ID, tools=[{"name": "Calculator"}, {"name": "Search", "rename": "Calculator"}])
    calc = with_variant(CalculatorTool(), VariantOptions(rename="Calc"))
    with pytest.raises(ValueError, match=r"'Calc'.*same name"):
        gym.make(ENV_ID, tools=[calc, {"name": "Search", "rename": "calc"}])


# -- failures --------------------------------------------------------------------------------
def test_failure_rate_one_fails_every_call_with_a_recorded_error() -> None:
    env = gym.make(ENV_ID, hops=2, max_turns=4, tools=[{"name": "Search", "failure_rate": 1.0}])
    info = run_episode(env, 1, ExpertPlanner(env).act)
    assert len(info["memory"]) == 4
    for entry in info["memory"]:
        assert entry["selected_tool"] == "Search" and not entry["tool_ok"]
        assert entry["errors"] == ["Search is unavailable (injected failure)"]
    assert [call["metadata"]["kind"] for call in tool_calls(env)] == ["injected"] * 4
    assert info["metrics"]["tool_errors"] == 4 and not info["success"]


def test_injected_failures_name_the_renamed_tool() -> None:
    tools = [{"name": "Calculator", "rename": "Math", "failure_rate": 1}]
    env = gym.make(ENV_ID, hops=1, max_turns=1, tools=tools)
    observation, info = env.reset(seed=0)
    action = format_planner_action("j", "1 + 1", "add", "Math")
    info = env.step(action)[-1]
    assert info["memory"][0]["errors"] == ["Math is unavailable (injected failure)"]


def failure_pattern(rate: float, seed: int, turns: int = 10) -> list[bool]:
    tools = [{"name": "Calculator", "failure_rate": rate}, "Search"]
    env = gym.make(ENV_ID, hops=1, max_turns=turns, tools=tools)
    info = run_episode(env, seed, calculator_steps)
    assert len(info["memory"]) == turns
    return [not entry["tool_ok"] for entry in info["memory"]]


def test_failure_rate_is_reproducible_per_seed() -> None:
    random.seed(1)
    first = failure_pattern(0.5, seed=7)
    random.seed(2)  # global random state plays no part
    assert failure_pattern(0.5, seed=7) == first
    assert any(first) and not all(first)
    others = [failure_pattern(0.5, seed=s) for s in (8, 9, 10)]
    assert any(pattern != first for pattern in others)
    # a lower rate fails a subset of the same calls
    fewer = failure_pattern(0.25, seed=7)
    assert all(f <= m for f, m in zip(fewer, first, strict=True))
    assert failure_pattern(0.0, seed=7) == [False] * 10


# -- degraded and slow tools ----------------------------------------------------------------------
def test_max_output_chars_cuts_and_says_how_much() -> None:
    plain = gym.make(ENV_ID, hops=1)
    full = run_episode(plain, 2, ExpertPlanner(plain).act)["memory"][0]["tool_result"]
    assert len(full) > 60
    env = gym.make(ENV_ID, hops=1, tools=[{"name": "Search", "max_output_chars": 60}])
    info = run_episode(env, 2, ExpertPlanner(env).act)
    entry = info["memory"][0]
    dropped = len(full) - 60
    assert entry["tool_ok"]
    assert entry["tool_result"] == full[:60] + f"\n...[output cut: {dropped} more characters]"
    assert tool_calls(env)[0]["metadata"]["injected_cut_chars"] == dropped


def test_latency_is_added_and_recorded() -> None:
    env = gym.make(ENV_ID, hops=2, max_turns=3, tools=[{"name": "Search", "latency_s": 0.02}])
    run_episode(env, 4, ExpertPlanner(env).act)
    calls = tool_calls(env)
    assert calls and all(call["ok"] for call in calls)
    assert [call["metadata"]["injected_latency_s"] for call in calls] == [0.02] * len(calls)


def test_latency_counts_against_the_tool_timeout() -> None:
    tools = [{"name": "Search", "latency_s": 5}]
    env = gym.make(ENV_ID, hops=1, max_turns=1, tools=tools, tool_timeout_s=0.05)
    info = run_episode(env, 0, ExpertPlanner(env).act)
    assert info["memory"][0]["errors"] == ["Search timed out after 0.05 s"]


# -- checks --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("rename", 42),
        ("rename", ""),
        ("rename", "   "),
        ("rename", "Two\nLines"),
        ("description", 3),
        ("failure_rate", -0.1),
        ("failure_rate", 1.5),
        ("failure_rate", "0.5"),
        ("failure_rate", True),
        ("max_output_chars", -1),
        ("max_output_chars", 2.5),
        ("max_output_chars", "10"),
        ("latency_s", -1),
        ("latency_s", float("inf")),
        ("latency_s", [1]),
    ],
)
def test_bad_options_are_rejected_naming_the_option(option: str, value: Any) -> None:
    entry = {"name": "Search", option: value}
    with pytest.raises(ValueError, match=rf"tool 'Search': {option} must"):
        gym.make(ENV_ID, tools=[entry])
    with pytest.raises(ValueError, match=rf"{option} must"):
        SearchEnvConfig.from_dict({"tools": [entry]})


def test_variant_objects_keep_their_json_form() -> None:
    tools = [{"name": "Search", "rename": "Lookup", "failure_rate": 0.5, "latency_s": 0}]
    config = SearchEnvConfig(tools=tools)
    data = json.loads(json.dumps(config.to_dict(defaults=False)))
    assert data["tools"] == tools
    assert SearchEnvConfig.from_dict(data) == config
