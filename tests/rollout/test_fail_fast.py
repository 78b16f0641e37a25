"""A setup that fails every trajectory stops the run with one clear error; one bad trajectory
stays a zero-reward sample.

``FailFast`` on its own, what counts as a failed trajectory (an exception, a frozen module's
error, a retriever nobody answers at), and the guard in the OpenRLHF executor and the TRL
rollout function, through the trainers' own classes.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import gymnasium as gym
import pytest

from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.rollout.checks.fail_fast import (
    DEFAULT_FAIL_FAST,
    FailFast,
    SystemicFailure,
    fail_fast_limit,
    hint,
    reason_key,
)
from agentflow_env.rollout.checks.failures import AdapterError, episode_logs, trajectory_failure

LABEL_ERROR = "TaskSpecError: the label {} names no task (at rollout/labels/spec.py:{} in parse)"


# -- the guard ---------------------------------------------------------------------------------
def test_the_limit_th_same_failure_in_a_row_raises_once_naming_reason_and_setting() -> None:
    guard = FailFast(limit=3)
    guard.record(LABEL_ERROR.format("'a'", 10))
    guard.record(LABEL_ERROR.format("'b'", 11))  # another task, same failure
    with pytest.raises(SystemicFailure) as caught:
        guard.record(LABEL_ERROR.format("'c'", 12))
    message = str(caught.value)
    assert "first 3 trajectories" in message and "names no task" in message
    assert "label column" in message and "AGENTFLOW_FAIL_FAST" in message
    assert isinstance(caught.value, AdapterError)  # the adapters let it through
    guard.record(LABEL_ERROR.format("'d'", 13))  # raised once: later ones are samples again
    assert guard.failed == 4 and not guard.armed


def test_a_trajectory_that_ran_stands_the_guard_down() -> None:
    guard = FailFast(limit=2)
    guard.record(None)
    for index in range(10):
        guard.record(LABEL_ERROR.format(index, index))
    assert guard.failed == 10 and guard.trajectories == 11


def test_different_reasons_do_not_add_up() -> None:
    guard = FailFast(limit=3)
    for _ in range(4):
        guard.record("TaskSpecError: bad label")
        guard.record("LLMError: module endpoint refused the connection")
    assert guard.armed


def test_limit_zero_turns_it_off_and_the_variable_is_checked() -> None:
    guard = FailFast(limit=0)
    for _ in range(100):
        guard.record("TaskSpecError: bad label")
    assert fail_fast_limit({}) == DEFAULT_FAIL_FAST == 16
    assert fail_fast_limit({"AGENTFLOW_FAIL_FAST": " 4 "}) == 4
    for bad in ("-1", "many"):
        with pytest.raises(ValueError, match="AGENTFLOW_FAIL_FAST"):
            fail_fast_limit({"AGENTFLOW_FAIL_FAST": bad})


def test_reason_keys_ignore_task_values_and_hints_name_the_setting() -> None:
    assert reason_key(LABEL_ERROR.format("'x1'", 5)) == reason_key(LABEL_ERROR.format("'y'", 7))
    assert reason_key("TaskSpecError: x") != reason_key("LLMError: x")
    assert "AGENTFLOW_TOKENIZER" in hint("TokenMismatchError: ids differ")
    assert "retriever" in hint("every tool call failed: Search: retriever unreachable")
    assert "module endpoint" in hint("module error: verifier: connection refused")


# -- what counts as a failed trajectory -----------------------------------------------------------
def run_expert(env: Any, seed: int = 0) -> Any:
    env.reset(seed=seed)
    planner = ExpertPlanner(env)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(planner.act())
        done = terminated or truncated
    return env.unwrapped.session


def test_a_healthy_episode_has_no_failure() -> None:
    env = gym.make("AgentFlow-Search-v0", hops=1, max_turns=3)
    session = run_expert(env)
    assert trajectory_failure(session) is None
    assert episode_logs(session)["failed"] == 0.0 and session.service_errors == ()


def test_a_retriever_nobody_answers_at_fails_every_tool_call() -> None:
    with socket.socket() as probe:  # a port on this machine with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = gym.make(
        "AgentFlow-Search-v0",
        hops=1,
        max_turns=2,
        retriever_url=f"http://127.0.0.1:{port}/retrieve",
    )
    session = run_expert(env)
    assert session.metrics.tool_calls >= 1
    assert len(session.service_errors) == session.metrics.tool_calls
    reason = trajectory_failure(session)
    assert reason is not None and reason.startswith("every tool call failed: Search")
    assert "retriever" in hint(reason)
    assert episode_logs(session)["failed"] == 1.0
    assert episode_logs(session)["error"] == 0.0  # it did not raise: the episode ran to its end


def test_an_exception_is_its_own_reason() -> None:
    try:
        raise KeyError("label")
    except KeyError as exc:
        reason = trajectory_failure(None, exc)
    assert reason is not None and reason.startswith("KeyError: 'label' (at ")
    assert trajectory_failure(None, "step: RuntimeError: boom") == "step: RuntimeError: boom"


# -- OpenRLHF: its own executor ------------------------------------------------------------------
openrlhf = pytest.importorskip("openrlhf.utils.agent")
from test_openrlhf_robustness import (  # noqa: E402
    BAD_LABELS,
    FAILING_ENV,
    ScriptedEngine,
    execute,
    hf_tokenizer,  # noqa: F401  (fixture)
    label_on,
    load_agent,  # noqa: F401  (fixture)
)


def test_openrlhf_bad_labels_stop_the_run_at_the_limit(load_agent, hf_tokenizer) -> None:  # noqa: F811
    module = load_agent(FAIL_FAST="4")
    executor = module.AgentExecutor()
    label = BAD_LABELS["not json"]
    for _ in range(3):  # each one is still a reward-0 sample
        result = asyncio.run(execute(executor, label, ScriptedEngine(), hf_tokenizer))
        assert result["reward"] == 0.0 and result["extra_logs"]["failed"] == 1.0
    with pytest.raises(module.AdapterError, match="first 4 trajectories.*label column"):
        asyncio.run(execute(executor, label, ScriptedEngine(), hf_tokenizer))


def test_openrlhf_module_endpoint_down_stops_the_run(load_agent, hf_tokenizer) -> None:  # noqa: F811
    module = load_agent(FAIL_FAST="3")
    executor = module.AgentExecutor()
    for index in range(2):
        label = label_on(FAILING_ENV, index)
        result = asyncio.run(execute(executor, label, ScriptedEngine(), hf_tokenizer))
        assert result["extra_logs"]["failed"] == 1.0 and result["extra_logs"]["error"] == 0.0
    with pytest.raises(SystemicFailure, match="module error.*endpoint down"):
        asyncio.run(execute(executor, label_on(FAILING_ENV, 2), ScriptedEngine(), hf_tokenizer))


def test_openrlhf_one_trajectory_that_ran_keeps_later_failures_as_samples(
    load_agent,  # noqa: F811
    hf_tokenizer,  # noqa: F811
) -> None:
    module = load_agent(FAIL_FAST="2")
    executor = module.AgentExecutor()
    healthy = label_on("AgentFlow-Search-v0", 0)
    asyncio.run(execute(executor, healthy, ScriptedEngine(), hf_tokenizer))
    for _ in range(5):
        result = asyncio.run(
            execute(executor, BAD_LABELS["not json"], ScriptedEngine(), hf_tokenizer)
        )
        assert result["reward"] == 0.0


# -- TRL: its own trainer ---------------------------------------------------------------------------
def test_trl_bad_labels_stop_training_with_one_clear_error(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("trl")
    from test_trl_failures import make_trainer

    from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer

    monkeypatch.setenv("AGENTFLOW_FAIL_FAST", "4")
    prompts = ["not a task spec", "not a task spec either"]
    trainer, _ = make_trainer(to_hf_tokenizer(load_default_tokenizer()), tmp_path, prompts, 2)
    with pytest.raises(SystemicFailure, match="first 4 trajectories.*TaskSpecError"):
        trainer.train()
