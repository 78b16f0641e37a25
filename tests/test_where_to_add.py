"""Each "Where to add" path of docs/architecture.md, followed as the page says, from outside the
package: a tool, an env variant, a module backend, a trainer adapter and a planner."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env import rollout
from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.envs.config import EnvConfig
from agentflow_env.envs.config.fields import UnknownSettingError
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.envs.registration import Variant, register_variant
from agentflow_env.rollout import run_episodes
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tasks.base import ListTaskSource, Task, TaskSource
from agentflow_env.tools import Tool
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.registry import register_tool
from agentflow_env.workflow.actions import format_finish_action, format_planner_action
from agentflow_env.workflow.frozen_modules import Verification
from agentflow_env.workflow.memory import Memory


# -- a tool ----------------------------------------------------------------------------------
class ShoutTool(Tool):
    card = ToolCard(
        name="Shout_Tool",
        description="Repeats its text in capitals.",
        input_schema={"text": {"type": "string", "description": "what to shout"}},
        output_type="str",
        primary_argument="text",
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if arguments["text"] == "crash":
            raise RuntimeError("the tool broke")
        return ToolResult(ok=True, output=arguments["text"].upper())


def _action(tool: str, context: str) -> str:
    return format_planner_action(
        justification="Try it.", context=context, sub_goal=context, tool_name=tool
    )


def test_a_tool_registered_by_name_runs_in_an_env_and_its_crash_is_recorded() -> None:
    register_tool("Shout_Tool", ShoutTool, overwrite=True)
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Shout_Tool"], max_turns=3)
    env.reset(seed=0)
    _, _, _, _, info = env.step(_action("Shout_Tool", "hello there"))
    assert info["tool"] == "Shout_Tool" and info["tool_ok"] is True
    assert "HELLO THERE" in str(info["memory"][-1])
    _, _, _, _, info = env.step(_action("Shout_Tool", "crash"))
    assert info["tool_ok"] is False and "the tool broke" in str(info["memory"][-1])
    env.close()


# -- an env variant --------------------------------------------------------------------------
TASKS = (
    Task("capital", "What is the capital of Zorbia?", ("Quon",)),
    Task("river", "Which river crosses Quon?", ("Blae",)),
)


@dataclass(frozen=True, kw_only=True)
class RiddleConfig(EnvConfig):
    env_id: ClassVar[str] = "Where-Riddles-v0"
    tasks_note: ClassVar[str] = "its tasks are two fixed riddles"

    def make_task_source(self) -> TaskSource:
        return ListTaskSource(TASKS)


def make_riddle_env(**settings: Any) -> AgentFlowEnv:
    return AgentFlowEnv(RiddleConfig.from_kwargs(**settings))


@pytest.fixture
def registry_restored() -> Any:
    """The variant tables and Gymnasium's registry as they were before the test."""
    tables = agentflow_env.envs.registration
    configs, entry_points = dict(tables.ENV_CONFIGS), dict(tables.ENV_ENTRY_POINTS)
    yield
    for env_id in set(tables.ENV_CONFIGS) - set(configs):
        gym.registry.pop(env_id, None)
    tables.ENV_CONFIGS.clear()
    tables.ENV_CONFIGS.update(configs)
    tables.ENV_ENTRY_POINTS.clear()
    tables.ENV_ENTRY_POINTS.update(entry_points)


@pytest.mark.usefixtures("registry_restored")
def test_an_env_variant_from_a_config_class_and_one_row() -> None:
    variant = Variant(RiddleConfig, f"{__name__}:make_riddle_env")
    register_variant(variant)
    register_variant(variant)  # the same row again: nothing happens
    env = gym.make("Where-Riddles-v0", max_turns=2)
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(seed=1)
    assert info["question"] in {task.question for task in TASKS}
    env.close()
    with pytest.raises(UnknownSettingError, match="Where-Riddles-v0 does not use hops="):
        gym.make("Where-Riddles-v0", hops=2)
    assert agentflow_env.envs.registration.config_class("Where-Riddles-v0") is RiddleConfig

    @dataclass(frozen=True, kw_only=True)
    class Impostor(RiddleConfig):
        pass

    with pytest.raises(ValueError, match="already the id of RiddleConfig"):
        register_variant(Variant(Impostor, f"{__name__}:make_riddle_env"))


# -- a module backend ------------------------------------------------------------------------
class StopAtOnce:
    """A verifier backend that stops after any turn."""

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, task: Task, memory: Memory) -> Verification:
        self.calls += 1
        return Verification(stop=True, rationale="One look is enough.")


def test_a_module_backend_for_one_role_beside_the_rule_modules() -> None:
    verifier = StopAtOnce()
    env = gym.make("AgentFlow-Search-v0", modules={"verifier": verifier}, max_turns=5)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(ExpertPlanner(env).act())
    assert terminated and verifier.calls == 1 and info["turn"] == 1
    env.close()


# -- a trainer adapter -----------------------------------------------------------------------
def tiny_adapter(labels: list[str], tokenizer: Any) -> list[dict[str, Any]]:
    """What an adapter does, with the front door only: labels in, per-sample tensors out."""
    action_ids = tokenizer.encode(_action("Search", "capital"))

    def generate(prompts: list[list[int]], max_new_tokens: int) -> Any:
        return [action_ids[:max_new_tokens] for _ in prompts], None

    results = rollout.run_episodes(labels, generate, tokenizer, pool=rollout.EnvPool())
    return [
        {"ids": r.completion_ids, "mask": r.env_mask, "reward": r.reward, "failed": r.failed}
        for r in results
    ]


def test_a_trainer_adapter_through_the_front_door() -> None:
    assert rollout.run_episodes is run_episodes and "run_episodes" in rollout.__all__
    labels = [rollout.task_prompt(seed, hops=1, max_turns=2) for seed in range(2)]
    samples = tiny_adapter([*labels, "not a label"], load_default_tokenizer())
    assert [s["failed"] for s in samples] == [False, False, True]
    for sample in samples:
        assert len(sample["ids"]) == len(sample["mask"])
    assert samples[2]["reward"] == 0.0 and sum(samples[0]["mask"]) > 0


# -- a planner -------------------------------------------------------------------------------
class FinishAtOnce:
    """A planner in the protocol: answers from the task's first gold answer, without a tool."""

    def __init__(self) -> None:
        self.turns: list[int] = []

    async def next_action(self, session: Any) -> str:
        self.turns.append(session.turn)
        return format_finish_action(session.task.gold_answers[0], "I know it.")


def test_a_planner_in_the_protocol_runs_with_run_episode() -> None:
    env = gym.make("AgentFlow-Search-v0", termination="planner", max_turns=3)
    planner = FinishAtOnce()
    record = run_episode(env, planner, seed=4)
    assert planner.turns == [0] and record.success and record.end_reason == "planner_stop"
    env.close()
