"""A frozen module that answers with the wrong shape is that module's failure, recorded; the
env never raises out of ``step`` because of it."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.modules.rule import (
    RuleExecutor,
    RuleGeneralist,
    RuleInitializer,
    RuleVerifier,
)
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.workflow.frozen_modules import Modules


class Returns:
    """A module method that returns ``value`` whatever it is asked."""

    def __init__(self, value: Any) -> None:
        self.value = value

    async def analyze(self, *args: Any) -> Any:
        return self.value

    async def verify(self, *args: Any) -> Any:
        return self.value

    async def answer(self, *args: Any) -> Any:
        return self.value


def env_with(**replace: Any) -> AgentFlowEnv:
    parts = {
        "initializer": RuleInitializer(),
        "executor": RuleExecutor(),
        "verifier": RuleVerifier(),
        "generalist": RuleGeneralist(),
        **replace,
    }
    return AgentFlowEnv(modules=Modules(**parts), hops=1)


def play(env: AgentFlowEnv, seed: int = 0) -> dict[str, Any]:
    obs, info = env.reset(seed=seed)
    planner = ExpertPlanner(env)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(planner.act(obs, info))
        done = terminated or truncated
    return info


@pytest.mark.parametrize("verdict", [None, "STOP", 1, object()])
def test_a_verifier_reply_without_a_verdict_ends_the_episode_as_a_module_error(verdict) -> None:
    info = play(env_with(verifier=Returns(verdict)))
    assert info["end_reason"] == "module_error" and info["turn"] == 1
    assert "verifier failed" in info["module_errors"][0]


@pytest.mark.parametrize("final", [None, "Paris", 42])
def test_a_generalist_reply_that_is_not_a_final_answer_scores_zero(final) -> None:
    info = play(env_with(generalist=Returns(final)))
    assert info["answer"] is None and info["reward"] == 0.0
    assert any("generalist failed" in e for e in info["module_errors"])


def test_an_initializer_reply_of_the_wrong_type_falls_back_to_the_bare_query() -> None:
    env = env_with(initializer=Returns({"objective": "x"}))
    _, info = env.reset(seed=0)
    assert "initializer failed" in info["initializer_error"]
    assert play(env)["success"]  # the episode itself still works


@pytest.mark.parametrize("score", [7.0, float("nan"), "high"])
def test_a_judge_score_outside_zero_one_is_a_judge_failure(score) -> None:
    class Judge:
        async def judge(self, *args: Any) -> Any:
            return score

    env = AgentFlowEnv(hops=1, reward="llm_judge", judge=Judge())
    info = play(env)
    assert info["score"] == 0.0 and any("judge failed" in e for e in info["module_errors"])
