"""The session's public surface: observation strategies, the outcome record, enums, action space."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

import agentflow_env
from agentflow_env import EndReason, EpisodeOutcome, VerificationStatus
from agentflow_env.base.spaces import PlannerActionSpace
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.agents.episodes import EpisodeRecord
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.action_input import MAX_TOKEN_ID
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.memory import MemoryEntry
from agentflow_env.workflow.observations import (
    OBSERVATION_MODES,
    FlatObservations,
    Observation,
    ObservationStrategy,
    StructuredObservations,
    make_observations,
)
from agentflow_env.workflow.outcome import EpisodeMetrics
from agentflow_env.workflow.session import Session, SessionConfig, StepOutcome

END_KEYS = {
    "answer",
    "final_text",
    "gold_answers",
    "success",
    "score",
    "end_reason",
    "diagnostics",
    "reward",
    "module_errors",
    "metrics",
}


def expert_action(task: Task, turn: int) -> str:
    step = task.gold_plan[min(turn, len(task.gold_plan) - 1)]
    return format_planner_action(
        justification="Follow the plan.",
        context=step.context,
        sub_goal=step.sub_goal,
        tool_name=step.tool,
    )


def a_task(env: AgentFlowEnv, seed: int = 0) -> Task:
    return env.task_source.sample(np.random.default_rng(seed))


def play(
    session: Session, actions: Any = None
) -> tuple[Observation, dict[str, Any], list[tuple[Observation, list[int], StepOutcome]]]:
    """Run ``session`` to its end with expert actions given as ids; every (prompt, ids, outcome)."""
    tokenizer = session.tokenizer

    async def run() -> tuple[Observation, dict[str, Any], list[Any]]:
        first, info = await session.start()
        steps = []
        while not session.done:
            prompt = session.observation
            assert prompt is not None
            text = expert_action(session.task, session.turn)
            ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
            steps.append((prompt, ids, await session.step(ids)))
        return first, info, steps

    return asyncio.run(run())


# -- observation strategies ------------------------------------------------------------------------
def test_the_factory_builds_the_strategy_a_setting_names() -> None:
    env = AgentFlowEnv(hops=1)
    assert set(OBSERVATION_MODES) == {"structured", "flat"}
    assert isinstance(make_observations("flat", env.prompt_encoder), FlatObservations)
    structured = make_observations("structured", env.prompt_encoder)
    assert isinstance(structured, StructuredObservations)
    assert structured.encoder is env.prompt_encoder
    assert FlatObservations.grows and not StructuredObservations.grows
    with pytest.raises(ValueError, match="observation_mode must be 'structured' or 'flat'"):
        make_observations("tree", env.prompt_encoder)
    with pytest.raises(ValueError, match="observation_mode must be 'structured' or 'flat'"):
        SessionConfig(observation_mode="tree")
    assert isinstance(AgentFlowEnv(observation_mode="flat").observations, FlatObservations)
    env.close()


def test_flat_identity_holds_through_flat_observations() -> None:
    env = AgentFlowEnv(hops=2)  # structured by default: the injected strategy decides
    session = Session(
        a_task(env),
        tools=env.tools,
        modules=env.modules,
        tokenizer=env.tokenizer,
        observations=FlatObservations(env.prompt_encoder),
    )
    first, _, steps = play(session)
    assert session.initial_observation is first
    assert len(steps) >= 2
    for prompt, ids, outcome in steps:
        grown = list(prompt.token_ids) + ids + list(outcome.feedback.token_ids)
        assert list(outcome.observation.token_ids) == grown
        assert outcome.feedback.token_ids  # something is always appended
        assert outcome.info["feedback_token_ids"] == list(outcome.feedback.token_ids)
        assert outcome.info["feedback_text"] == outcome.feedback.text
    records = session.turn_records
    assert isinstance(records, tuple) and len(records) == len(steps)
    assert [list(r.feedback_ids) for r in records] == [
        list(o.feedback.token_ids) for _, _, o in steps
    ]
    trajectory = session.trajectory()
    assert trajectory.observation_mode == "flat"
    sample = trajectory.flat_sample()
    assert sample.input_ids[: sample.prompt_length] == list(first.token_ids)
    env.close()


def test_structured_observations_give_empty_feedback() -> None:
    env = AgentFlowEnv(hops=2, observation_mode="structured")
    session = env.new_session(a_task(env))
    assert isinstance(session.observations, StructuredObservations)
    _, _, steps = play(session)
    for _, _, outcome in steps:
        assert outcome.feedback.text == "" and outcome.feedback.token_ids == []
        assert "feedback_text" not in outcome.info
        assert "feedback_token_ids" not in outcome.info
    # Rendered afresh from memory: the last prompt is what the memory renders to now.
    assert steps[-1][2].observation is session.observation
    rendered = session.prompt_encoder.render(session.messages())
    assert session.observation is not None
    assert rendered.token_ids == session.observation.token_ids
    assert all(not r.feedback_ids and r.feedback_text == "" for r in session.turn_records)
    with pytest.raises(ValueError, match="flat"):
        session.trajectory().flat_sample()
    env.close()


def test_observation_spaces_come_from_the_strategy() -> None:
    for mode, limit in (("structured", None), ("flat", MAX_TOKEN_ID + 1)):
        env = AgentFlowEnv(observation_mode=mode)
        vocab = env.tokenizer.vocab_size
        strategy: ObservationStrategy = env.observations
        assert env.observation_space == strategy.observation_space(vocab)
        assert env.observation_space["token_ids"].id_limit == (limit or vocab)
        past = {"text": "x", "token_ids": np.asarray([vocab + 3], dtype=np.int64)}
        assert env.observation_space.contains(past) == (mode == "flat")
        env.close()


# -- the outcome record ----------------------------------------------------------------------------
def test_the_outcome_record_equals_the_final_info() -> None:
    env = AgentFlowEnv(hops=2, observation_mode="flat")
    session = env.new_session(a_task(env))
    assert session.outcome is None and not session.done
    _, _, steps = play(session)
    for _, _, outcome in steps[:-1]:
        assert not END_KEYS & set(outcome.info)
    final = steps[-1][2]
    record = session.outcome
    assert isinstance(record, EpisodeOutcome)
    assert record.as_info() == {key: final.info[key] for key in END_KEYS}
    assert set(record.as_info()) == END_KEYS
    assert record.end_reason is EndReason.VERIFIER_STOP and final.terminated
    assert not final.truncated and record.success and final.reward == record.reward
    assert record.metrics == session.metrics.as_dict()
    assert isinstance(session.metrics, EpisodeMetrics)
    assert session.metrics.turns == session.turn == len(steps)
    trajectory = session.trajectory()
    assert (trajectory.reward, trajectory.success) == (record.reward, record.success)
    env.close()


def test_a_truncated_episode_records_its_end_reason() -> None:
    env = AgentFlowEnv(hops=2, max_turns=1)
    session = env.new_session(a_task(env))

    async def run() -> StepOutcome:
        await session.start()
        return await session.step("no fields at all")

    outcome = asyncio.run(run())
    assert outcome.truncated and not outcome.terminated
    assert session.outcome is not None
    assert session.outcome.end_reason is EndReason.MAX_TURNS
    assert outcome.info["end_reason"] == "max_turns" == EndReason.MAX_TURNS
    assert outcome.info["verification"] == VerificationStatus.INVALID
    assert session.outcome.as_info() == {key: outcome.info[key] for key in END_KEYS}
    env.close()


# -- enums serialise as plain strings --------------------------------------------------------------
def test_enums_are_plain_strings_in_info_and_json() -> None:
    env = AgentFlowEnv(hops=2)
    session = env.new_session(a_task(env))
    _, _, steps = play(session)
    info = steps[-1][2].info
    statuses = [entry["verification_status"] for entry in info["memory"]]
    assert statuses[-1] == "STOP" and set(statuses[:-1]) == {"CONTINUE"}
    assert all(type(status) is str for status in statuses)
    assert type(info["verification"]) is str and type(info["end_reason"]) is str
    text = json.dumps(info)
    assert "VerificationStatus" not in text and "EndReason" not in text
    decoded = json.loads(text)
    assert decoded["end_reason"] == "verifier_stop"
    assert decoded["memory"][-1]["verification_status"] == "STOP"
    # The entries themselves hold the enum, which reads, formats and prints as its string.
    entry = session.memory.entries[-1]
    assert entry.verification_status is VerificationStatus.STOP
    assert entry.verification_status == "STOP" and f"{entry.verification_status}" == "STOP"
    assert str(EndReason.TOTAL_BUDGET) == f"{EndReason.TOTAL_BUDGET}" == "total_budget"
    assert json.dumps([VerificationStatus.ERROR, EndReason.PROMPT_BUDGET]) == (
        '["ERROR", "prompt_budget"]'
    )
    assert "Verification: STOP" in session.memory.render()
    # Entries read back from plain dicts hold the enum again.
    again = MemoryEntry(**info["memory"][-1])
    assert again.verification_status is VerificationStatus.STOP
    assert again.as_dict() == entry.as_dict()
    record = EpisodeRecord("t", "q", (), None, False, 0.0, None, end_reason="module_error")
    assert record.module_failed
    env.close()


def test_enum_values_are_todays_strings() -> None:
    assert [s.value for s in VerificationStatus] == [
        "STOP",
        "CONTINUE",
        "INVALID",
        "ERROR",
        "PENDING",
    ]
    assert {r.value for r in EndReason} == {
        "verifier_stop",
        "planner_stop",
        "max_turns",
        "module_error",
        "prompt_budget",
        "total_budget",
        "time_limit",
    }
    assert VerificationStatus("STOP") is VerificationStatus.STOP
    assert EndReason.VERIFIER_STOP == "verifier_stop"
    for name in ("EndReason", "VerificationStatus", "EpisodeOutcome"):
        assert name in agentflow_env.__all__ and hasattr(agentflow_env, name)


# -- the action space ------------------------------------------------------------------------------
def test_the_action_space_holds_the_three_forms_and_rejects_junk() -> None:
    env = AgentFlowEnv()
    space = env.action_space
    assert isinstance(space, PlannerActionSpace)
    vocab = env.tokenizer.vocab_size
    good: list[Any] = [
        "Context: x\nTool Name: Search",
        "",
        [1, 2, 3],
        (5,),
        np.asarray([0, vocab - 1], dtype=np.int64),
        [vocab + 7],  # past the vocabulary: kept verbatim (the turn is invalid, not refused)
        {"token_ids": [1, 2], "logprobs": [-0.5, -1.25]},
        {"token_ids": np.asarray([1, 2]), "logprobs": np.asarray([-0.5, None], dtype=object)},
        {"token_ids": [4]},
        {"text": "Context: x\nTool Name: Search"},
    ]
    junk: list[Any] = [
        None,
        3,
        1.5,
        b"bytes",
        object(),
        [],
        [-1],
        [1.5, 2.0],
        [True, False],
        [[1, 2], [3, 4]],
        [MAX_TOKEN_ID + 1],
        np.zeros((2, 2), dtype=np.int64),
        {},
        {"logprobs": [0.0]},
        {"token_ids": [1], "logprobs": [-0.1, -0.2]},  # one log-prob per id
        {"token_ids": [1], "logprobs": [float("inf")]},
        {"token_ids": [1], "logprobs": "-0.1"},
        {"token_ids": [1], "extra": 1},
        {"token_ids": [1], "text": "both"},
        {"token_ids": "1 2"},
        {"text": 5},
    ]
    for action in good:
        assert space.contains(action), action
    for action in junk:
        assert not space.contains(action), action
    space.seed(3)
    first = [space.sample() for _ in range(5)]
    space.seed(3)
    assert [space.sample() for _ in range(5)] == first
    assert all(isinstance(a, str) and space.contains(a) for a in first)
    env.close()


def test_the_env_steps_on_every_form_the_action_space_holds() -> None:
    env = AgentFlowEnv(hops=2, observation_mode="flat")
    tokenizer = env.tokenizer
    obs, info = env.reset(seed=0)
    text = expert_action(env.task, 0)
    ids = tokenizer.encode(text)
    for action in (text, ids, {"token_ids": ids, "logprobs": [-0.1] * len(ids)}):
        assert env.action_space.contains(action)
        env.reset(seed=0)
        _, _, _, _, info = env.step(action)
        assert info["verification"] in {"CONTINUE", "STOP"} and not info["errors"]
    env.close()
